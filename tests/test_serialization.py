"""torch.save / torch.load of device tensors and state dicts; modules, parameters, grads."""

import io

import pytest
import torch
import torch.nn as nn

from conftest import DEV, assert_bitwise_equal, assert_same, to_dev


def _roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3, bias=True), nn.LayerNorm(3))


@pytest.mark.parametrize("map_location", [None, "cpu", "dev"])
@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(3, 4),
        lambda: torch.arange(10, dtype=torch.int64),
        lambda: torch.tensor(2.5, dtype=torch.float64),
        lambda: torch.zeros(0, 3),
        lambda: torch.tensor([True, False]),
        lambda: torch.tensor([float("nan"), -0.0, float("inf")], dtype=torch.float16),
        lambda: torch.randn(5).to(torch.bfloat16),
    ],
    ids=["f32", "i64", "0d", "empty", "bool", "f16-specials", "bf16"],
)
def test_save_load_tensor(make, map_location):
    c = make()
    d = to_dev(c)
    kw = {}
    if map_location is not None:
        kw["map_location"] = DEV if map_location == "dev" else map_location
    r = _roundtrip(d, **kw)
    expect_dev = "cpu" if map_location == "cpu" else DEV
    assert r.device.type == expect_dev
    assert_bitwise_equal(r.cpu(), c)
    assert r.shape == c.shape and r.dtype == c.dtype


def test_save_load_views_keep_sharing():
    """Saving a base and a view of it together keeps them aliased after load."""
    c = torch.arange(12, dtype=torch.float32)
    d = to_dev(c)
    views = {"base": d, "view": d[2:8].view(2, 3), "t": d.view(3, 4).t()}
    r = _roundtrip(views)
    for k in views:
        assert r[k].device.type == DEV
        assert r[k].shape == views[k].shape
        assert r[k].stride() == views[k].stride()
        assert r[k].storage_offset() == views[k].storage_offset()
        assert_same(r[k], views[k])
    r["view"].fill_(-1)
    expected = c.clone()
    expected[2:8] = -1
    assert_same(r["base"], expected)
    assert_same(r["t"], expected.view(3, 4).t())


def test_save_load_mixed_devices():
    obj = {"a": to_dev(torch.arange(3.0)), "b": torch.arange(4), "n": 5, "l": [to_dev(torch.ones(2))]}
    r = _roundtrip(obj)
    assert r["a"].device.type == DEV and r["b"].device.type == "cpu" and r["n"] == 5
    assert r["l"][0].device.type == DEV
    assert_same(r["a"], torch.arange(3.0))
    assert_same(r["l"][0], torch.ones(2))


@pytest.mark.parametrize("map_location", [None, "cpu", "dev"])
def test_state_dict_save_load(map_location):
    ref = _model()
    m = _model().to(DEV)
    sd = m.state_dict()
    for k, v in sd.items():
        assert v.device.type == DEV, k
    kw = {}
    if map_location is not None:
        kw["map_location"] = DEV if map_location == "dev" else map_location
    loaded = _roundtrip(sd, **kw)
    assert list(loaded) == list(ref.state_dict())
    expect_dev = "cpu" if map_location == "cpu" else DEV
    for k, v in ref.state_dict().items():
        assert loaded[k].device.type == expect_dev, k
        assert_bitwise_equal(loaded[k].cpu(), v, msg=k)

    # Load into a fresh CPU model and into a fresh device model.
    fresh_cpu = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3), nn.LayerNorm(3))
    fresh_cpu.load_state_dict(loaded)
    for (k, v), (_, e) in zip(fresh_cpu.state_dict().items(), ref.state_dict().items()):
        assert v.device.type == "cpu"
        assert_bitwise_equal(v, e, msg=k)
    fresh_dev = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3), nn.LayerNorm(3)).to(DEV)
    fresh_dev.load_state_dict(loaded)
    for (k, v), (_, e) in zip(fresh_dev.state_dict().items(), ref.state_dict().items()):
        assert v.device.type == DEV
        assert_bitwise_equal(v.cpu(), e, msg=k)


def test_model_to_device_and_back():
    ref = _model()
    m = _model()
    r = m.to(DEV)
    assert r is m
    for (name, p), (_, pc) in zip(m.named_parameters(), ref.named_parameters()):
        assert isinstance(p, nn.Parameter), name
        assert p.requires_grad
        assert p.device.type == DEV, name
        assert p.is_leaf
        assert_bitwise_equal(p.detach().cpu(), pc.detach(), msg=name)
    m.to("cpu")
    for (name, p), (_, pc) in zip(m.named_parameters(), ref.named_parameters()):
        assert isinstance(p, nn.Parameter)
        assert p.device.type == "cpu"
        assert_bitwise_equal(p.detach(), pc.detach(), msg=name)
    # dtype change on the device, then back
    m.to(DEV, torch.float64)
    for (name, p), (_, pc) in zip(m.named_parameters(), ref.named_parameters()):
        assert p.dtype == torch.float64 and p.device.type == DEV
        assert_same(p.detach(), pc.detach().double(), msg=name)


def test_module_buffers_move():
    bn = nn.BatchNorm1d(3)
    bn.running_mean.fill_(0.5)
    bn.to(DEV)
    assert bn.running_mean.device.type == DEV
    assert bn.num_batches_tracked.device.type == DEV
    assert_same(bn.running_mean, torch.full((3,), 0.5))
    assert_same(bn.num_batches_tracked, torch.tensor(0))


def test_parameter_on_device():
    c = torch.randn(3, 4)
    p = nn.Parameter(to_dev(c))
    assert isinstance(p, nn.Parameter)
    assert p.requires_grad and p.is_leaf
    assert p.device.type == DEV
    assert p.data.device.type == DEV
    assert_same(p.detach(), c)
    q = nn.Parameter(to_dev(c), requires_grad=False)
    assert not q.requires_grad
    assert "Parameter containing" in repr(p)
    # Saving and loading a Parameter keeps its type.
    r = _roundtrip(p, weights_only=False)
    assert isinstance(r, nn.Parameter) and r.device.type == DEV
    assert_same(r.detach(), c)


def _grads(where):
    wc = torch.tensor([[1.0, -2.0, 3.5], [0.25, 4.0, -1.0]])
    xc = torch.tensor([[2.0, 0.5, -1.0], [3.0, -0.75, 8.0]])
    w = (wc.clone() if where == "cpu" else to_dev(wc)).requires_grad_()
    x = xc.clone() if where == "cpu" else to_dev(xc)
    loss = (w * x).sum()
    loss.backward()
    g1 = w.grad.clone()
    # Accumulation on a second backward.
    (w * x * 2).sum().backward()
    return loss.detach(), g1, w.grad, x.grad


def test_grad_on_device():
    lc, g1c, g2c, xgc = _grads("cpu")
    ld, g1d, g2d, xgd = _grads("dev")
    assert xgc is None and xgd is None
    assert g1d.device.type == DEV
    assert_same(ld, lc)
    assert_same(g1d, g1c)
    assert_same(g2d, g2c)


def test_grad_of_parameter_after_backward():
    wc = torch.arange(6, dtype=torch.float32).reshape(2, 3) / 4
    xc = torch.arange(6, dtype=torch.float32).reshape(2, 3) - 2
    results = {}
    for where in ("cpu", "dev"):
        p = nn.Parameter(wc.clone() if where == "cpu" else to_dev(wc))
        x = xc.clone() if where == "cpu" else to_dev(xc)
        (p * x).sum().backward()
        assert p.grad is not None
        assert p.grad.device.type == (DEV if where == "dev" else "cpu")
        results[where] = p.grad
        p.grad = None
        assert p.grad is None
    assert_same(results["dev"], results["cpu"])
