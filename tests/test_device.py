"""The "tiny" device: registration, torch.tiny module, generated methods, autoload."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from conftest import DEV, IS_TINY, requires_tiny, to_dev


def test_device_object():
    requires_tiny()
    d = torch.device("tiny")
    assert d.type == "tiny"
    d0 = torch.device("tiny", 0)
    assert d0.type == "tiny" and d0.index == 0
    assert torch.device("tiny:0") == d0
    assert torch._C._get_privateuse1_backend_name() == "tiny"


def test_device_module():
    requires_tiny()
    assert hasattr(torch, "tiny")
    assert torch.tiny.is_available() is True
    n = torch.tiny.device_count()
    assert isinstance(n, int) and n >= 1
    assert torch.tiny.current_device() == 0
    torch.tiny.synchronize()
    torch.tiny.manual_seed(0)


def test_synchronize_with_pending_work():
    requires_tiny()
    x = torch.arange(6, dtype=torch.float32).to("tiny")
    y = x * 2 + 1
    torch.tiny.synchronize()
    torch.testing.assert_close(y.cpu(), torch.arange(6, dtype=torch.float32) * 2 + 1)


def test_generated_methods():
    requires_tiny()
    assert hasattr(torch.Tensor, "tiny")
    assert hasattr(torch.Tensor, "is_tiny")
    c = torch.arange(4)
    assert c.is_tiny is False
    t = c.tiny()
    assert t.device.type == "tiny"
    assert t.is_tiny is True
    assert torch.equal(t.cpu(), c)


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.zeros(2, 3, device=DEV),
        lambda: torch.empty(4, device=DEV),
        lambda: torch.ones(2, device=torch.device(DEV)),
        lambda: torch.arange(5).to(DEV),
        lambda: to_dev(torch.randn(3, 3)),
    ],
    ids=["zeros", "empty", "ones-device-object", "to", "to_dev"],
)
def test_tensor_device(make):
    t = make()
    assert t.device.type == DEV
    if IS_TINY:
        assert t.device.index in (None, 0)
        assert t.is_tiny
        assert not t.is_cpu


def test_to_and_cpu_keep_values():
    c = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t = c.to(DEV)
    assert t.device.type == DEV
    back = t.cpu()
    assert back.device.type == "cpu"
    assert torch.equal(back, c)
    back2 = t.to("cpu")
    assert torch.equal(back2, c)


_AUTOLOAD_SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    t = torch.zeros(2, device="tiny")
    assert t.device.type == "tiny", t.device
    assert t.cpu().tolist() == [0.0, 0.0], t.cpu()
    assert "torch_tiny" in sys.modules, "torch_tiny was not autoloaded"
    print("AUTOLOAD_OK")
    """
)


def test_autoload_entry_point(tmp_path):
    """Plain `import torch` loads torch_tiny through the torch.backends entry point."""
    requires_tiny()
    env = dict(os.environ)
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)  # default is on
    proc = subprocess.run(
        [sys.executable, "-c", _AUTOLOAD_SCRIPT],
        cwd=str(tmp_path),  # not the source tree: the installed package must be found
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "AUTOLOAD_OK" in proc.stdout
