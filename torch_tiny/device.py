"""``torch.tiny``: the device module PyTorch expects of a PrivateUse1 backend."""
import torch

from . import _C

_current = 0


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> int:
    return _current


def set_device(device) -> None:
    idx = _get_device_index(device)
    if idx != 0:
        raise RuntimeError(f"tiny: invalid device index {idx}; only tiny:0 exists")


def synchronize(device=None) -> None:
    """Runs all pending work: every storage with a lazy value is realized."""
    _C._synchronize()


def _get_device_index(device, optional=True) -> int:
    if device is None:
        return _current
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    return device.index if device.index is not None else _current


class device:
    """Context manager selecting the tiny device (there is one: tiny:0)."""

    def __init__(self, device):
        self.idx = _get_device_index(device)

    def __enter__(self):
        return self

    def __exit__(self, *args):
        return False


def _is_in_bad_fork() -> bool:
    return False


def _default_generator():
    return _C._default_generator()


def manual_seed(seed: int) -> None:
    _default_generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def seed() -> None:
    _default_generator().seed()


def initial_seed() -> int:
    return _default_generator().initial_seed()


def get_rng_state(device="tiny") -> torch.Tensor:
    return _default_generator().get_state()


def set_rng_state(new_state: torch.Tensor, device="tiny") -> None:
    _default_generator().set_state(new_state)


def is_initialized() -> bool:
    return True


def _lazy_init() -> None:
    pass


def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16]


def memory_allocated(device=None) -> int:
    return 0
