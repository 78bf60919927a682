"""torch_tiny.debug counters: kernels are counted, copies are counted separately."""

import pytest
import torch

from conftest import IS_TINY, assert_same

if not IS_TINY:
    pytest.skip("tiny-specific tests (torch_tiny.debug)", allow_module_level=True)

import importlib  # noqa: E402

import torch_tiny  # noqa: E402

# torch_tiny.debug may be a submodule or an attribute of the package.
debug = getattr(torch_tiny, "debug", None) or importlib.import_module("torch_tiny.debug")


def _chain(a, b):
    """Eight elementwise ops; fusable into one kernel."""
    y = a + b  # 1
    y = y * a  # 2
    y = y - b  # 3
    y = y * 0.5  # 4
    y = y.abs()  # 5
    y = y + 1.0  # 6
    y = y.sqrt()  # 7
    y = y.neg()  # 8
    return y


def _inputs():
    ac = torch.linspace(-3.0, 3.0, 1024).reshape(32, 32)
    bc = torch.linspace(0.5, 2.0, 1024).reshape(32, 32).t().contiguous()
    a, b = ac.to("tiny"), bc.to("tiny")
    torch.tiny.synchronize()
    debug.reset()
    return ac, bc, a, b


def test_api_exists():
    assert callable(debug.reset)
    assert callable(debug.kernel_count)
    assert callable(debug.copy_count)
    assert callable(debug.count_kernels)


def test_reset_zeroes_counters():
    x = torch.arange(8.0).to("tiny")
    ((x + 1) * 2).cpu()
    debug.reset()
    assert debug.kernel_count() == 0
    assert debug.copy_count() == 0


def test_eight_op_chain_is_one_kernel():
    ac, bc, a, b = _inputs()
    assert debug.kernel_count() == 0
    y = _chain(a, b)
    out = y.cpu()
    assert debug.kernel_count() == 1
    assert_same(out, _chain(ac, bc), check_device=False)


def test_count_kernels_context_manager():
    ac, bc, a, b = _inputs()
    with debug.count_kernels() as c:
        out = _chain(a, b).cpu()
    assert c.kernels == 1
    assert_same(out, _chain(ac, bc), check_device=False)
    # Work after the block does not change the recorded number.
    _chain(a, a).cpu()
    assert c.kernels == 1


def test_count_kernels_nothing_run():
    _inputs()
    with debug.count_kernels() as c:
        pass
    assert c.kernels == 0


def test_second_identical_run_is_one_kernel():
    ac, bc, a, b = _inputs()
    with debug.count_kernels() as c1:
        out1 = _chain(a, b).cpu()
    torch.tiny.synchronize()
    with debug.count_kernels() as c2:
        out2 = _chain(a, b).cpu()
    assert c1.kernels == 1
    assert c2.kernels == 1
    assert torch.equal(out1, out2)
    # And with fresh inputs of the same shape (a cached schedule must still run 1 kernel).
    ac2, bc2, a2, b2 = _inputs()
    with debug.count_kernels() as c3:
        out3 = _chain(a2, b2).cpu()
    assert c3.kernels == 1
    assert_same(out3, _chain(ac2, bc2), check_device=False)


def test_copies_are_counted_separately():
    ac = torch.arange(64, dtype=torch.float32)
    torch.tiny.synchronize()
    debug.reset()
    a = ac.to("tiny")
    torch.tiny.synchronize()
    # A host-to-device copy is a copy, not a kernel.
    assert debug.kernel_count() == 0
    assert debug.copy_count() >= 1
    debug.reset()
    back = a.cpu()
    assert debug.kernel_count() == 0
    assert debug.copy_count() >= 1
    assert torch.equal(back, ac)
    # A computed value: one kernel, plus the copy back.
    debug.reset()
    (a * 2 + 1).cpu()
    assert debug.kernel_count() == 1
    assert debug.copy_count() >= 1


def test_kernel_count_accumulates_until_reset():
    _, _, a, b = _inputs()
    _chain(a, b).cpu()
    _chain(b, a).cpu()
    assert debug.kernel_count() == 2
    debug.reset()
    assert debug.kernel_count() == 0
