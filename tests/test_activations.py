"""Activations on the device vs the CPU: forward in every float dtype on edge values and with
their arguments, in-place and out= forms, dtype errors, the backward ops autograd calls
(compared directly and through autograd, including the in-place forms), a small training step,
and kernel counts."""

import copy

import pytest
import torch

from conftest import FLOAT_DTYPES, assert_same, requires_tiny, sync, to_dev
from pointwise_util import float_values, int_values, run_both

F = torch.nn.functional

ACTIVATIONS = {
    "relu": F.relu, "relu6": F.relu6, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu, "mish": F.mish, "softplus": F.softplus,
    "softplus_args": lambda x: F.softplus(x, beta=2.5, threshold=5.0),
    "softplus_neg_beta": lambda x: F.softplus(x, beta=-1.0), "elu": F.elu,
    "elu_alpha": lambda x: F.elu(x, alpha=0.3), "selu": F.selu, "celu": lambda x: F.celu(x, alpha=1.7),
    "leaky_relu": F.leaky_relu, "leaky_relu_slope": lambda x: F.leaky_relu(x, 0.2),
    "leaky_relu_neg": lambda x: F.leaky_relu(x, -0.5), "hardtanh": F.hardtanh,
    "hardtanh_args": lambda x: F.hardtanh(x, -0.25, 2.5), "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish,
    "logsigmoid": F.logsigmoid, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
    "threshold": lambda x: F.threshold(x, 0.5, -2.0), "hardshrink": F.hardshrink,
    "hardshrink_l": lambda x: F.hardshrink(x, 1.5), "softshrink": F.softshrink,
    "softshrink_l": lambda x: F.softshrink(x, 2.0), "tanhshrink": F.tanhshrink, "softsign": F.softsign,
    "rrelu_eval": lambda x: F.rrelu(x, training=False), "logit": torch.logit,
    "glu": lambda x: F.glu(x.reshape(-1, 2), dim=-1) if x.numel() % 2 == 0 else F.glu(x[1:].reshape(-1, 2)),
    "prelu": lambda x: F.prelu(x.reshape(-1, 1), torch.tensor([0.25], dtype=x.dtype, device=x.device)),
}
LOOSE = {"mish": 1e-5, "softplus": 1e-5, "softplus_args": 1e-5, "softplus_neg_beta": 1e-5, "logsigmoid": 1e-5,
         "gelu": 1e-5, "gelu_tanh": 1e-5, "selu": 1e-5, "celu": 1e-5, "elu": 1e-5, "elu_alpha": 1e-5,
         "tanhshrink": 1e-5, "silu": 1e-5}


def _tols(name, dtype):
    if dtype == torch.float32 and name in LOOSE:
        return dict(rtol=LOOSE[name], atol=1e-6)
    return {}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_forward(name, dtype):
    x = float_values(dtype)
    if name == "gelu":
        # PyTorch's CPU gelu(+inf) depends on which of its kernels runs: the scalar loop and
        # float64 give +inf (the limit), the vectorized float erf gives NaN on some CPUs (AVX-512
        # Intel) and +inf on others (AVX2 AMD). tiny gives the limit everywhere; +inf is checked
        # on its own and left out of the comparison.
        got = F.gelu(to_dev(torch.tensor([float("inf")], dtype=dtype))).cpu()
        assert got.item() == float("inf"), got
        x = x[x != float("inf")]
    run_both(ACTIVATIONS[name], x, msg=f"{name} {dtype}", **_tols(name, dtype))


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.bool], ids=str)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_integer_inputs(name, dtype):
    # relu / hardtanh / threshold work on integers; the rest raise the CPU's error
    run_both(ACTIVATIONS[name], int_values(dtype), msg=f"{name} {dtype}")


INPLACE = {
    "relu": lambda x: F.relu(x, inplace=True), "relu6": lambda x: F.relu6(x, inplace=True),
    "elu": lambda x: F.elu(x, inplace=True), "selu": lambda x: F.selu(x, inplace=True),
    "celu": lambda x: F.celu(x, 0.5, inplace=True), "leaky_relu": lambda x: F.leaky_relu(x, 0.1, inplace=True),
    "hardtanh": lambda x: F.hardtanh(x, -2.0, 2.0, inplace=True), "hardsigmoid": lambda x: F.hardsigmoid(x, True),
    "hardswish": lambda x: F.hardswish(x, True), "silu": lambda x: F.silu(x, True), "mish": lambda x: F.mish(x, True),
    "threshold": lambda x: F.threshold(x, 0.1, 20.0, inplace=True), "gelu_": torch._C._nn.gelu_,
    "sigmoid_": torch.sigmoid_, "rrelu_eval": lambda x: F.rrelu(x, training=False, inplace=True),
}


@pytest.mark.parametrize("name", list(INPLACE))
def test_inplace(name):
    x = float_values(torch.float32)
    if name == "gelu_":
        x = x[x != float("inf")]  # the CPU's answer depends on its kernel, see test_forward
    run_both(lambda t: INPLACE[name](t.clone()), x, msg=name, **_tols(name, torch.float32))
    # through a strided view: the base changes only where the view looks
    run_both(lambda t: (INPLACE[name](t[::3]), t)[1], x.clone(), msg=f"{name} on a view", **_tols(name, torch.float32))


@pytest.mark.parametrize("name,fn", [
    ("gelu", torch._C._nn.gelu), ("silu", torch._C._nn.silu), ("elu", torch._C._nn.elu),
    ("softplus", torch._C._nn.softplus), ("leaky_relu", torch._C._nn.leaky_relu), ("hardtanh", torch._C._nn.hardtanh),
    ("hardsigmoid", torch._C._nn.hardsigmoid), ("hardswish", torch._C._nn.hardswish), ("mish", torch._C._nn.mish),
    ("threshold", lambda x, out: torch.threshold(x, 0.0, 1.0, out=out)),
    ("hardshrink", torch.hardshrink), ("softshrink", torch._C._nn.softshrink),
    ("log_sigmoid", torch._C._nn.log_sigmoid),
])
def test_out_variants(name, fn):
    x = float_values(torch.float32)
    if name == "gelu":
        x = x[x != float("inf")]  # the CPU's answer depends on its kernel, see test_forward
    x = x.reshape(-1, 1)
    run_both(lambda t, o: (fn(t, out=o), o)[1], x, torch.empty(0), msg=name, **_tols(name, torch.float32))
    run_both(lambda t, o: (fn(t, out=o), o)[1], x, torch.empty(2, 2), msg=f"{name} resized", **_tols(name, torch.float32))
    # a float64 out is the CPU's error for most activations, a cast for threshold
    run_both(lambda t, o: (fn(t, out=o), o)[1], x, torch.empty(0, dtype=torch.float64), msg=f"{name} f64 out",
             rtol=1.3e-6, atol=1e-5)


def test_argument_errors():
    x = torch.randn(4, 6)
    run_both(lambda t: F.gelu(t, approximate="fast"), x, msg="gelu approximate")
    run_both(lambda t: F.softshrink(t, -0.5), x, msg="softshrink negative lambda")
    run_both(lambda t: F.hardtanh(t, -1, 1), torch.arange(5, dtype=torch.uint8), msg="hardtanh unsigned negative")
    run_both(lambda t: F.hardtanh(t, 1, 3), torch.arange(5, dtype=torch.uint8), msg="hardtanh unsigned")
    run_both(lambda t: F.hardtanh(t, -1.5, 2.5), torch.arange(-3, 4), msg="hardtanh int truncates bounds")
    run_both(lambda t: F.glu(t, dim=0), torch.randn(3, 4), msg="glu odd dim")
    run_both(lambda t: F.glu(t), torch.tensor(1.0), msg="glu 0-d")
    run_both(lambda t: F.glu(t, dim=-2), torch.randn(4, 3), msg="glu negative dim")
    run_both(lambda t: F.relu(t), torch.tensor([True]), msg="relu bool")
    run_both(lambda t: F.threshold(t, 0, 1), torch.tensor([True]), msg="threshold bool")


def test_layouts():
    g = torch.Generator().manual_seed(4)
    for x in (torch.tensor(-0.5), torch.empty(0, 3), torch.randn(6, 5, generator=g).t(),
              torch.randn(1, 5, generator=g).expand(4, 5), torch.randn(1 << 18, generator=g)):
        for name in ("gelu", "silu", "elu", "hardswish", "logsigmoid", "softplus", "mish"):
            run_both(ACTIVATIONS[name], x, msg=f"{name} {tuple(x.shape)}", **_tols(name, torch.float32))


# ------------------------------------------------------------------------------ backward ops
BACKWARD_OPS = {
    "threshold_backward": lambda g, x: torch.ops.aten.threshold_backward(g, x, 0.25),
    "sigmoid_backward": lambda g, x: torch.ops.aten.sigmoid_backward(g, torch.sigmoid(x)),
    "tanh_backward": lambda g, x: torch.ops.aten.tanh_backward(g, torch.tanh(x)),
    "gelu_backward": lambda g, x: torch.ops.aten.gelu_backward(g, x),
    "gelu_backward_tanh": lambda g, x: torch.ops.aten.gelu_backward(g, x, approximate="tanh"),
    "silu_backward": lambda g, x: torch.ops.aten.silu_backward(g, x),
    "mish_backward": lambda g, x: torch.ops.aten.mish_backward(g, x),
    "elu_backward": lambda g, x: torch.ops.aten.elu_backward(g, 0.7, 1.2, 0.9, False, x),
    "elu_backward_result": lambda g, x: torch.ops.aten.elu_backward(g, 0.7, 1.2, 0.9, True, F.elu(x, 0.7)),
    "softplus_backward": lambda g, x: torch.ops.aten.softplus_backward(g, x, 1.5, 3.0),
    "hardtanh_backward": lambda g, x: torch.ops.aten.hardtanh_backward(g, x, -1.0, 2.0),
    "hardsigmoid_backward": lambda g, x: torch.ops.aten.hardsigmoid_backward(g, x),
    "hardswish_backward": lambda g, x: torch.ops.aten.hardswish_backward(g, x),
    "leaky_relu_backward": lambda g, x: torch.ops.aten.leaky_relu_backward(g, x, 0.15, False),
    "log_sigmoid_backward": lambda g, x: torch.ops.aten.log_sigmoid_backward(g, x, torch.ops.aten.log_sigmoid_forward(x)[1]),
    "logit_backward": lambda g, x: torch.ops.aten.logit_backward(g, torch.sigmoid(x)),
    "logit_backward_eps": lambda g, x: torch.ops.aten.logit_backward(g, torch.sigmoid(x), 0.2),
    "hardshrink_backward": lambda g, x: torch.ops.aten.hardshrink_backward(g, x, 0.5),
    "softshrink_backward": lambda g, x: torch.ops.aten.softshrink_backward(g, x, 0.5),
    "glu_backward": lambda g, x: torch.ops.aten.glu_backward(g[..., :4], x, -1),
    "prelu_kernel_backward": lambda g, x: torch.ops.aten._prelu_kernel_backward(g, x, x.new_full((1,), 0.3)),
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(BACKWARD_OPS))
def test_backward_ops(name, dtype):
    # 128 elements: ATen's vectorized loop covers all of them. (Its scalar tail loop treats NaN
    # differently in several of these kernels and rounds each step for 16-bit floats; tiny
    # follows the vectorized loop.)
    x = float_values(dtype, n_random=95).reshape(16, 8)
    g = torch.randn(16, 8, generator=torch.Generator().manual_seed(9)).to(dtype)
    run_both(BACKWARD_OPS[name], g, x, msg=f"{name} {dtype}", rtol=1e-5 if dtype == torch.float32 else None,
             atol=1e-6 if dtype == torch.float32 else None)


def test_backward_op_errors():
    g, x = torch.randn(3), torch.randn(3)
    run_both(lambda a, b: torch.ops.aten.elu_backward(a, -0.5, 1.0, 1.0, True, b), g, x, msg="negative alpha in-place")
    run_both(lambda a, b: torch.ops.aten.leaky_relu_backward(a, b, -0.1, True), g, x, msg="negative slope in-place")


GRAD_FNS = {k: v for k, v in ACTIVATIONS.items() if k not in ("relu6",)}
GRAD_FNS["relu6"] = F.relu6


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", list(GRAD_FNS))
def test_autograd(name, dtype):
    g = torch.Generator().manual_seed(11)
    x = torch.randn(48, generator=g, dtype=dtype) * 3
    x[:4] = torch.tensor([0.0, -3.0, 3.0, 6.0], dtype=dtype)  # the kinks and edges
    fn = GRAD_FNS[name]
    xc = x.clone().requires_grad_()
    yc = fn(xc)
    go = torch.randn(yc.shape, generator=g, dtype=dtype)
    (gc,) = torch.autograd.grad(yc, xc, go)
    xd = to_dev(x).requires_grad_()
    yd = fn(xd)
    (gd,) = torch.autograd.grad(yd, xd, to_dev(go))
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else {}
    assert_same(yd, yc, msg=f"{name} forward", **tol)
    assert_same(gd, gc, msg=f"{name} grad", **tol)


@pytest.mark.parametrize("name", ["relu", "elu", "leaky_relu", "hardtanh", "silu", "hardswish", "hardsigmoid", "celu",
                                  "selu", "mish", "threshold", "relu6"])
def test_autograd_through_inplace(name):
    """x * 2 then the in-place activation: autograd uses the result-based backward forms."""
    fns = {"relu": lambda t: F.relu(t, inplace=True), "elu": lambda t: F.elu(t, 0.8, inplace=True),
           "leaky_relu": lambda t: F.leaky_relu(t, 0.05, inplace=True),
           "hardtanh": lambda t: F.hardtanh(t, -1.5, 1.5, inplace=True), "silu": lambda t: F.silu(t, True),
           "hardswish": lambda t: F.hardswish(t, True), "hardsigmoid": lambda t: F.hardsigmoid(t, True),
           "celu": lambda t: F.celu(t, 1.3, True), "selu": lambda t: F.selu(t, True), "mish": lambda t: F.mish(t, True),
           "threshold": lambda t: F.threshold(t, 0.3, 0.0, True), "relu6": lambda t: F.relu6(t, True)}
    g = torch.Generator().manual_seed(12)
    x = torch.randn(5, 7, generator=g) * 4
    go = torch.randn(5, 7, generator=g)

    def run(t, grad_out):
        t = t.clone().requires_grad_()
        y = fns[name](t * 2)
        (gx,) = torch.autograd.grad(y, t, grad_out)
        return y.detach(), gx

    yc, gc = run(x, go)
    yd, gd = run(to_dev(x), to_dev(go))
    assert_same(yd, yc, msg=name, rtol=1e-5, atol=1e-6)
    assert_same(gd, gc, msg=name, rtol=1e-5, atol=1e-6)


def test_training_step_matches_cpu():
    """Two SGD steps of a small MLP using several activations: no fallback, CPU's numbers."""
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 16), torch.nn.SiLU(),
        torch.nn.Linear(16, 16), torch.nn.Hardswish(), torch.nn.Linear(16, 16), torch.nn.ELU(),
        torch.nn.Linear(16, 16), torch.nn.Mish(), torch.nn.Linear(16, 16), torch.nn.LeakyReLU(0.1),
        torch.nn.Linear(16, 16), torch.nn.Softplus(), torch.nn.Linear(16, 16), torch.nn.Tanh(),
        torch.nn.Linear(16, 1), torch.nn.Sigmoid())
    dev_model = copy.deepcopy(cpu_model).to(to_dev(torch.zeros(1)).device)
    g = torch.Generator().manual_seed(3)
    x, target = torch.randn(32, 8, generator=g), torch.rand(32, 1, generator=g)
    opt_c = torch.optim.SGD(cpu_model.parameters(), lr=0.5)
    opt_d = torch.optim.SGD(dev_model.parameters(), lr=0.5)
    for _ in range(2):
        for model, opt, xi, ti in ((cpu_model, opt_c, x, target), (dev_model, opt_d, to_dev(x), to_dev(target))):
            opt.zero_grad()
            loss = ((model(xi) - ti) ** 2).mean()
            loss.backward()
            opt.step()
    for (n, pc), pd in zip(cpu_model.named_parameters(), dev_model.parameters()):
        assert_same(pd, pc.detach(), msg=n, rtol=1e-4, atol=1e-5)


# Kernels for forward + backward of act(x).sum() w.r.t. x: one, with or without the forward
# value kept alive. The scheduler counts distinct evaluations (the generated code computes a
# shared exp/tanh once per element), and the forward output merges with the gradient kernel.
_ACTIVATIONS = ["silu", "gelu", "hardswish", "elu", "leaky_relu", "softplus", "mish", "logsigmoid", "sigmoid",
                "tanh", "relu", "hardsigmoid", "selu", "celu"]
KERNELS_GRAD_ONLY = {name: 1 for name in _ACTIVATIONS}
KERNELS_WITH_FORWARD = {name: 1 for name in _ACTIVATIONS}
_KERNEL_FNS = {"silu": F.silu, "gelu": F.gelu, "hardswish": F.hardswish, "elu": F.elu, "leaky_relu": F.leaky_relu,
               "softplus": F.softplus, "mish": F.mish, "logsigmoid": F.logsigmoid, "sigmoid": torch.sigmoid,
               "tanh": torch.tanh, "relu": F.relu, "hardsigmoid": F.hardsigmoid, "selu": F.selu, "celu": F.celu}


@pytest.mark.parametrize("name", list(_KERNEL_FNS))
def test_forward_backward_kernel_counts(name):
    requires_tiny()
    from torch_tiny import debug

    fn = _KERNEL_FNS[name]
    x = to_dev(torch.randn(64, 64))
    xd = x.clone().requires_grad_()
    sync()
    with debug.count_kernels() as c:
        y = fn(xd)
        (gx,) = torch.autograd.grad(y.sum(), xd)
        del y
    assert c.kernels == KERNELS_GRAD_ONLY[name]
    with debug.count_kernels() as c:
        y = fn(xd)
        (gx,) = torch.autograd.grad(y.sum(), xd)
    assert c.kernels == KERNELS_WITH_FORWARD[name]
    xc = x.cpu().requires_grad_()
    (gc,) = torch.autograd.grad(fn(xc).sum(), xc)
    assert_same(gx, gc, rtol=1e-5, atol=1e-6)
    assert_same(y, fn(x.cpu()), rtol=1e-5, atol=1e-6)


def test_rrelu_training_draws_slopes():
    """Training-mode rrelu: random slopes in [lower, upper] for non-positive inputs (tiny's own
    random stream, so the values are checked for their properties, not against the CPU's)."""
    x = to_dev(torch.linspace(-5, 5, 1001))
    torch.manual_seed(0)
    y = F.rrelu(x, 0.1, 0.3, training=True).cpu()
    xc = x.cpu()
    neg = xc < 0
    slopes = y[neg] / xc[neg]
    assert ((slopes >= 0.1) & (slopes <= 0.3)).all()
    assert slopes.std() > 0.03  # really random, not one slope
    assert torch.equal(y[xc > 0], xc[xc > 0])
    torch.manual_seed(0)
    assert torch.equal(F.rrelu(x, 0.1, 0.3, training=True).cpu(), y)  # the seed makes it repeatable
    # the gradient is the recorded noise: the slope for negatives, 1 elsewhere
    xg = x.clone().requires_grad_()
    torch.manual_seed(1)
    yg = F.rrelu(xg, 0.1, 0.3, training=True)
    (g,) = torch.autograd.grad(yg.sum(), xg)
    g = g.cpu()
    torch.testing.assert_close(g[neg], (yg.detach().cpu() / xc)[neg])
    assert torch.equal(g[xc > 0], torch.ones_like(g[xc > 0]))
    # in-place form and dtype errors as on the CPU
    run_both(lambda t: F.rrelu(t, training=True), torch.arange(4), msg="rrelu int training")
