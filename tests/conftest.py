"""Shared fixtures and helpers for the torch_tiny pytest suite.

The device under test is ``TINY_TEST_DEVICE`` (default ``"tiny"``).  Running the suite
with ``TINY_TEST_DEVICE=cpu`` checks the test logic itself against PyTorch's CPU backend;
tests that only make sense for the tiny backend (device module, autoload, fallback,
debug counters) skip in that mode.

Every numeric test runs the same computation on the device under test and on the CPU
and compares the two with :func:`assert_same` (or :func:`assert_bitwise_equal` for pure
data movement).
"""

import os
import sys

# Strict mode: an op without a tiny kernel raises instead of silently falling back to
# the CPU, so the suite notices missing kernels.  Must be set before torch_tiny loads.
os.environ.setdefault("TINY_STRICT", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

DEV = os.environ.get("TINY_TEST_DEVICE", "tiny")
IS_TINY = DEV == "tiny"

if IS_TINY:
    import torch_tiny  # noqa: E402,F401

# Make ``from conftest import ...`` work whatever pytest's import mode is.
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

ALL_DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INT_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]

# Same-itemsize integer dtype used to compare raw bits.
_BITS_DTYPE = {
    1: torch.uint8,
    2: torch.int16,
    4: torch.int32,
    8: torch.int64,
}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "large: allocates a very large tensor (>= 512 MiB); runs once"
    )
    config.addinivalue_line(
        "markers", "slow: a heavy whole-model test (runs by default; deselect with -m 'not slow')"
    )


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def dev():
    """The device under test, as a string ("tiny" or e.g. "cpu")."""
    return DEV


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


def requires_tiny():
    """Call at the top of a tiny-specific test: skips when testing another device."""
    if not IS_TINY:
        pytest.skip(f"tiny-specific test (TINY_TEST_DEVICE={DEV})")


# --------------------------------------------------------------------------- helpers


def to_dev(t):
    """A copy of ``t`` on the device under test (never an alias, even on the CPU)."""
    return t.to(DEV, copy=True)


def sync():
    """Wait for (and, for the lazy backend, run) all pending device work."""
    if IS_TINY:
        torch.tiny.synchronize()


def _is_exact_dtype(dtype):
    return not (dtype.is_floating_point or dtype.is_complex)


def assert_same(actual, expected, *, check_device=True, rtol=None, atol=None, msg=""):
    """Check a device result against the CPU result.

    Tensors: dtype, shape and values (NaNs equal, exact for integer/bool dtypes,
    dtype-aware tolerances for floating dtypes unless ``rtol``/``atol`` are given).
    With ``check_device`` the actual tensor must live on the device under test.
    Tuples/lists are compared element-wise; other Python values with ``==``.
    """
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{msg}: expected a tensor, got {type(actual)}"
        if check_device:
            assert actual.device.type == DEV, (
                f"{msg}: result on {actual.device}, expected device type {DEV!r}"
            )
        assert actual.dtype == expected.dtype, f"{msg}: dtype {actual.dtype} != {expected.dtype}"
        assert tuple(actual.shape) == tuple(expected.shape), (
            f"{msg}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
        )
        a = actual.detach().cpu()
        e = expected.detach().cpu()
        if _is_exact_dtype(expected.dtype):
            kw = dict(rtol=0, atol=0)
        elif rtol is not None or atol is not None:
            kw = dict(rtol=rtol or 0, atol=atol or 0)
        else:
            kw = {}  # torch.testing's dtype-aware defaults
        torch.testing.assert_close(
            a, e, equal_nan=True, check_device=False, check_stride=False, msg=msg or None, **kw
        )
    elif isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)), f"{msg}: expected a sequence, got {type(actual)}"
        assert len(actual) == len(expected), f"{msg}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, check_device=check_device, rtol=rtol, atol=atol, msg=f"{msg}[{i}]")
    elif isinstance(expected, float) and expected != expected:  # NaN
        assert isinstance(actual, float) and actual != actual, f"{msg}: {actual!r} is not NaN"
    else:
        assert type(actual) is type(expected), f"{msg}: type {type(actual)} != {type(expected)}"
        assert actual == expected, f"{msg}: {actual!r} != {expected!r}"


def bits(t):
    """The raw bits of ``t`` as a CPU tensor of a same-itemsize integer dtype."""
    t = t.detach().cpu().contiguous()
    return t.view(_BITS_DTYPE[t.element_size()])


def assert_bitwise_equal(actual, expected, *, check_device=False, msg=""):
    """Dtype, shape and every bit equal (NaN payloads, -0.0 and all)."""
    if check_device:
        assert actual.device.type == DEV, f"{msg}: result on {actual.device}"
    assert actual.dtype == expected.dtype, f"{msg}: dtype {actual.dtype} != {expected.dtype}"
    assert tuple(actual.shape) == tuple(expected.shape), (
        f"{msg}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    )
    a, e = bits(actual), bits(expected)
    if not torch.equal(a, e):
        diff = (a != e).nonzero()
        first = tuple(diff[0].tolist()) if diff.numel() else ()
        raise AssertionError(
            f"{msg}: {int((a != e).sum())} of {e.numel()} elements differ in their bits; "
            f"first at {first}: {a[first].item():#x} != {e[first].item():#x}"
        )


def assert_same_layout(actual, expected, msg=""):
    """size(), stride(), storage_offset() and is_contiguous() equal."""
    assert tuple(actual.size()) == tuple(expected.size()), (
        f"{msg}: size {tuple(actual.size())} != {tuple(expected.size())}"
    )
    assert actual.stride() == expected.stride(), (
        f"{msg}: stride {actual.stride()} != {expected.stride()}"
    )
    assert actual.storage_offset() == expected.storage_offset(), (
        f"{msg}: storage_offset {actual.storage_offset()} != {expected.storage_offset()}"
    )
    assert actual.is_contiguous() == expected.is_contiguous(), (
        f"{msg}: is_contiguous {actual.is_contiguous()} != {expected.is_contiguous()}"
    )
