"""torch.compile(backend="tiny"): captured graphs run as C++ programs through the dispatcher.

Each test compiles on the device under test and compares with the same code run eagerly on the
CPU (and, for tiny, with eager tiny: same numbers and no more kernels). Inductor, the default
backend, refuses tiny tensors with a message naming backend="tiny".
"""
import copy
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import DEV, IS_TINY, assert_same, requires_tiny, sync, to_dev

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from mnist import beautiful_mnist  # noqa: E402

if IS_TINY:
    import torch_tiny.compile as tiny_compile


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    before = tiny_compile.graphs_run_by_python if IS_TINY else 0
    yield
    torch._dynamo.reset()
    if IS_TINY:
        # every graph these tests capture runs as a C++ program, except where a test says so
        assert tiny_compile.graphs_run_by_python == before


def _kernels(fn):
    if not IS_TINY:
        return fn(), None
    from torch_tiny import debug
    with debug.count_kernels() as c:
        out = fn()
        sync()
    return out, c.kernels


def test_mlp_forward_and_backward():
    model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
    x = torch.randn(5, 8)
    expected = model(x)
    expected.square().sum().backward()

    dev_model = copy.deepcopy(model).to(DEV)
    dev_model.zero_grad()
    compiled = torch.compile(dev_model, backend="tiny")
    out = compiled(to_dev(x))
    out.square().sum().backward()
    assert_same(out, expected)
    for (name, p), pd in zip(model.named_parameters(), dev_model.parameters()):
        assert_same(pd.grad, p.grad, msg=name)
    with torch.no_grad():
        assert_same(compiled(to_dev(x)), expected.detach())


def test_graph_features():
    """Lists in and out (split, cat, index with None), several results (max with indices),
    numbers where a Tensor goes, keyword-only arguments, constants, views and dtypes."""

    def f(x, idx):
        a, b, c = torch.split(x, [2, 3, 1], dim=1)
        m, where = torch.max(b, dim=1)
        y = torch.cat([a * 2, c + 1, where[:, None].to(x.dtype)], dim=1)
        z = y[idx, None] + torch.arange(4.0, device=x.device)
        w = torch.full_like(m, 0.5) + torch.tensor(3.0, device=x.device)
        return z.transpose(0, 2).sum(dim=-1, keepdim=True), w, m.to(torch.float16), where

    x = torch.randn(4, 6)
    idx = torch.tensor([3, 0, 0])
    expected = f(x, idx)
    actual = torch.compile(f, backend="tiny")(to_dev(x), to_dev(idx))
    assert_same(actual, expected)


def test_input_mutation_and_empty():
    def f(x, acc):
        acc.add_(x.sum(0))
        x.mul_(2)
        return x[1:] - 1, torch.empty(0, 3, device=x.device).sum(0)

    x, acc = torch.randn(3, 5), torch.zeros(5)
    xd, accd = to_dev(x), to_dev(acc)
    expected = f(x, acc)
    actual = torch.compile(f, backend="tiny")(xd, accd)
    assert_same(actual, expected)
    assert_same(xd, x)
    assert_same(accd, acc)


def test_dropout_matches_eager_on_the_same_seed():
    requires_tiny()

    def f(x):
        return F.dropout(x.relu(), p=0.3, training=True) * 3

    x = to_dev(torch.randn(64, 64))
    torch.manual_seed(5)
    eager = f(x)
    compiled = torch.compile(f, backend="tiny")
    compiled(x)  # the first call compiles (and consumes random numbers while tracing)
    torch.manual_seed(5)
    assert_same(compiled(x), eager.cpu(), rtol=0, atol=0)


def test_mnist_training_step_matches_cpu_and_eager():
    """Adam steps of the beautiful-MNIST CNN through a compiled model: the CPU's losses and
    parameters, and on tiny the eager step's losses, parameters and kernel count."""
    torch.manual_seed(0)
    model = beautiful_mnist()
    x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))

    def run(device, compile_model):
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        f = torch.compile(m, backend="tiny") if compile_model else m
        xd, yd = x.to(device), y.to(device)
        losses, kernels = [], []
        for _ in range(3):
            def step():
                opt.zero_grad()
                loss = F.cross_entropy(f(xd), yd)
                loss.backward()
                opt.step()
                return loss.item()
            loss, k = _kernels(step) if device != "cpu" else (step(), None)
            losses.append(loss)
            kernels.append(k)
        return losses, m, kernels

    cpu_losses, cpu_model, _ = run("cpu", False)
    losses, dev_model, kernels = run(DEV, True)
    for a, e in zip(losses, cpu_losses):
        assert abs(a - e) <= 1e-3 * abs(e)
    for (name, p), pd, p0 in zip(cpu_model.named_parameters(), dev_model.parameters(), model.parameters()):
        diff, moved = (pd.detach().cpu() - p.detach()).norm(), (p.detach() - p0).norm()
        assert diff <= 1e-2 * moved, f"{name}: |compiled - cpu| = {diff} vs |update| = {moved}"
    if IS_TINY:
        eager_losses, eager_model, eager_kernels = run(DEV, False)
        assert losses == eager_losses
        for pe, pc in zip(eager_model.parameters(), dev_model.parameters()):
            assert torch.equal(pe.detach().cpu(), pc.detach().cpu())
        # a compiled step builds the same lazy graph: never more kernels than eager
        assert kernels[2] <= eager_kernels[2]


def test_resnet18_eval_forward():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected = model(x)
        dev_model = copy.deepcopy(model).to(DEV)
        actual, kernels = _kernels(lambda: torch.compile(dev_model, backend="tiny")(to_dev(x)))
        eager, eager_kernels = _kernels(lambda: dev_model(to_dev(x)))
    assert_same(actual, expected, rtol=1e-3, atol=1e-4)
    if IS_TINY:
        assert_same(actual, eager.cpu(), rtol=0, atol=0, check_device=False)
        assert kernels <= eager_kernels


def test_dynamic_sizes():
    """Sizes that Dynamo keeps symbolic: passed as graph inputs, they run in the C++ program; a
    graph that computes with them (a reshape to a symbolic size) runs operator by operator
    through FX instead, with a warning, and stays correct."""
    requires_tiny()

    def plain(x):
        return (x * 2).sum(0)

    def reshaping(x):
        return x.view(x.shape[0] * 3) * 2

    for f, through_fx in ((plain, False), (reshaping, True)):
        compiled = torch.compile(f, backend="tiny")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for rows in (6, 8):
                x = torch.randn(rows, 3)
                xd = to_dev(x)
                torch._dynamo.mark_dynamic(xd, 0)
                assert_same(compiled(xd), f(x))
        assert any("through FX" in str(w.message) for w in caught) == through_fx, f.__name__
    tiny_compile.graphs_run_by_python -= 1  # the reshaping graph, which the fixture would count


def test_default_backend_names_tiny():
    requires_tiny()
    model = nn.Linear(4, 2).to(DEV)
    with pytest.raises(Exception, match=r'backend="tiny"'):
        torch.compile(model)(to_dev(torch.randn(3, 4)))
    # Inductor still compiles CPU graphs in the same process
    cpu_model = nn.Linear(4, 2)
    x = torch.randn(3, 4)
    assert_same(torch.compile(cpu_model)(x), cpu_model(x), check_device=False)
