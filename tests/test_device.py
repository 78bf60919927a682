"""The "tiny" device: registration, torch.tiny module, generated methods, autoload."""

import gc
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

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


# ----------------------------------------------------------------------- which device computes


def test_backend_and_properties():
    requires_tiny()
    backend = torch.tiny.get_backend()
    assert backend in ("cpu", "cuda", "cuda-emu")
    want = os.environ.get("TINY_DEVICE", "auto")
    if want != "auto":
        assert backend == want
    p = torch.tiny.get_device_properties()
    assert p.name and p.name == torch.tiny.get_device_name()
    assert p.total_memory > 0 and p.multi_processor_count >= 1
    if backend == "cpu":
        assert p.vector_bits in (128, 256, 512)
    else:
        assert p.major >= 5 and p.arch == f"sm_{p.major}{p.minor}"
        assert torch.tiny.get_device_capability() == (p.major, p.minor)
    assert backend in repr(p)
    with pytest.raises(RuntimeError, match="only tiny:0 exists"):
        torch.tiny.get_device_properties(1)


def _tf32(x):
    """float32 values as a GPU's cvt.rna.tf32 rounds them: 10 mantissa bits, ties away from zero."""
    bits = x.view(torch.int32)
    finite = (bits & 0x7F800000) != 0x7F800000
    return torch.where(finite, (bits + 0x1000) & -0x2000, bits).view(torch.float32)


def test_allow_tf32_is_pytorchs_switch():
    requires_tiny()
    assert torch.tiny.matmul.allow_tf32 is False  # float32 is exact by default
    torch.manual_seed(0)
    a, b = torch.randn(64, 96), torch.randn(96, 48)
    x, w = torch.randn(2, 8, 12, 12), torch.randn(32, 8, 3, 3)
    exact = [a @ b, F.conv2d(x, w, padding=1)]
    try:
        torch.tiny.matmul.allow_tf32 = True
        # the switch torch.backends.cuda.matmul.allow_tf32 and set_float32_matmul_precision set
        assert torch.backends.cuda.matmul.allow_tf32 and torch.get_float32_matmul_precision() == "high"
        got = [(a.tiny() @ b.tiny()).cpu(), F.conv2d(x.tiny(), w.tiny(), padding=1).cpu()]
    finally:
        torch.tiny.matmul.allow_tf32 = False
    assert torch.get_float32_matmul_precision() == "highest"
    torch.testing.assert_close((a.tiny() @ b.tiny()).cpu(), exact[0])  # switched off: exact again
    if torch.tiny.get_backend() == "cpu":  # no tensor cores: float32 stays exact
        for g, e in zip(got, exact):
            torch.testing.assert_close(g, e)
        return
    # tensor cores: the exact products of the rounded factors
    rounded = [_tf32(a) @ _tf32(b), F.conv2d(_tf32(x), _tf32(w), padding=1)]
    for g, r, e in zip(got, rounded, exact):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)
        assert ((g - e).abs() > 1e-4 * (e.abs() + 1)).float().mean() > 0.5


def _run(script, **env_vars):
    env = dict(os.environ, **env_vars)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True,
                          timeout=300)


def test_tiny_device_chooses_the_backend():
    requires_tiny()
    script = """
        import torch, torch_tiny
        x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        y = ((x.to("tiny") * 2).exp().sum(1) - 1).cpu()
        torch.testing.assert_close(y, (x * 2).exp().sum(1) - 1)
        print("BACKEND", torch.tiny.get_backend())
    """
    emu = _run(script, TINY_DEVICE="cuda-emu")
    assert emu.returncode == 0, emu.stderr
    assert "BACKEND cuda-emu" in emu.stdout
    bogus = _run(script, TINY_DEVICE="tpu")
    assert bogus.returncode != 0 and "TINY_DEVICE must be cpu, cuda, cuda-emu or auto, not 'tpu'" in bogus.stderr
    if torch.tiny.get_backend() != "cuda":  # no GPU here: asking for one says why
        gpu = _run(script, TINY_DEVICE="cuda")
        assert gpu.returncode != 0
        assert "RuntimeError: tiny: TINY_DEVICE=cuda: " in gpu.stderr, gpu.stderr


# ----------------------------------------------------------------------- memory


def test_memory_statistics_follow_realized_tensors():
    requires_tiny()
    torch.tiny.synchronize()
    torch.tiny.empty_cache()
    base = torch.tiny.memory_allocated()
    assert torch.tiny.memory_reserved() == base  # nothing cached after empty_cache
    torch.tiny.reset_peak_memory_stats()
    mib4 = 4 << 20
    x = torch.randn(1024, 1024).to("tiny")  # copied in: 4 MiB on the device
    assert torch.tiny.memory_allocated() == base + mib4
    y = x * 2 + 1  # lazy: nothing computed, nothing allocated
    assert torch.tiny.memory_allocated() == base + mib4
    torch.tiny.synchronize()
    assert torch.tiny.memory_allocated() == base + 2 * mib4
    assert torch.tiny.max_memory_allocated() == base + 2 * mib4
    del x, y
    assert torch.tiny.memory_allocated() == base
    assert torch.tiny.memory_reserved() == base + 2 * mib4  # freed blocks stay cached for reuse
    stats = torch.tiny.memory_stats()
    assert stats["allocated_bytes.all.current"] == base
    assert stats["allocated_bytes.all.peak"] == base + 2 * mib4
    torch.tiny.empty_cache()
    assert torch.tiny.memory_reserved() == base
    torch.tiny.reset_peak_memory_stats()
    assert torch.tiny.max_memory_allocated() == base
    free, total = torch.tiny.mem_get_info()
    assert 0 <= free <= total == torch.tiny.get_device_properties().total_memory


def test_out_of_memory_is_torch_out_of_memory_error():
    requires_tiny()
    keep = torch.arange(10, dtype=torch.float32).to("tiny") * 3
    torch.tiny.synchronize()
    ooms = torch.tiny.memory_stats()["num_ooms"]
    total = torch.tiny.mem_get_info()[1]
    huge = torch.ones(2 * total, dtype=torch.uint8, device="tiny")  # lazy until synchronized
    with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate"):
        torch.tiny.synchronize()
    assert torch.tiny.memory_stats()["num_ooms"] == ooms + 1
    del huge
    # the process and every other tensor survive
    torch.testing.assert_close(keep.cpu(), torch.arange(10, dtype=torch.float32) * 3)
    torch.testing.assert_close((keep + 1).sum().item(), 145.0)


def test_pin_memory_as_on_cuda():
    """pin_memory() gives host memory from tiny's pinned allocator (page-locked on a GPU):
    is_pinned() says so, copies to tiny from it carry the values, DataLoader pins batches."""
    t = torch.arange(7000, dtype=torch.float32).reshape(1000, 7) * 0.5
    p = t.pin_memory()
    assert p.is_pinned() and not t.is_pinned()
    assert p.device.type == "cpu" and torch.equal(p, t)
    assert p[3:].is_pinned() and p.t().is_pinned()  # views of pinned memory are pinned
    d = p.to("tiny")
    p.fill_(-1.0)  # the copy has finished reading the source
    assert torch.equal(d.cpu(), t)
    assert torch.equal(p.to("tiny", non_blocking=True).cpu(), torch.full_like(t, -1.0))
    back = d.cpu().pin_memory()
    assert back.is_pinned() and torch.equal(back, t)
    from torch.utils.data import DataLoader, TensorDataset
    ds = TensorDataset(torch.randn(10, 3), torch.arange(10))
    seen = 0
    for x, y in DataLoader(ds, batch_size=4, pin_memory=True):
        assert x.is_pinned() and y.is_pinned()
        assert torch.equal(x.to("tiny").cpu(), ds.tensors[0][seen:seen + len(x)])
        seen += len(x)
    assert seen == 10
    del p, back
    gc.collect()


def test_host_copies_keep_their_place_among_queued_kernels():
    """On the CPU a training step's loss.item() returns while its backward and optimizer
    kernels still run on the device's queue. What the host does next must see and leave the
    values as if each kernel had run at once: a new batch copied in over memory a queued
    kernel may still read, a parameter overwritten from the host, parameters read back."""
    requires_tiny()
    torch.manual_seed(0)
    # wide enough that the backward's kernels (~10 ms) still run when the next batch comes in;
    # in float64, so that no pre-activation within float32's rounding of zero flips a ReLU
    # between the two runs (MKL's float32 sums on Intel did, 7e-5 apart after six steps)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)).double()
    batches = [(torch.randn(512, 512, dtype=torch.float64), torch.randint(0, 10, (512,))) for _ in range(6)]
    new_bias = torch.randn(10, dtype=torch.float64)

    def train(m, dev):
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        losses = []
        for step, (x, y) in enumerate(batches):
            opt.zero_grad()
            loss = F.cross_entropy(m(x.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if step == 2:
                with torch.no_grad():
                    m[2].bias.copy_(new_bias)  # a host write while the step's kernels may run
        return losses, [p.detach().cpu() for p in m.parameters()]

    import copy
    want_losses, want = train(copy.deepcopy(model), "cpu")
    got_losses, got = train(copy.deepcopy(model).to(DEV), DEV)
    for step, (a, b) in enumerate(zip(got_losses, want_losses)):
        assert abs(a - b) <= 1e-10 * max(1.0, abs(b)), f"loss of step {step}: {a} vs {b}"
    for i, (a, b) in enumerate(zip(got, want)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=f"parameter {i} after the last step")
