"""torch_tiny: a lazy, fusing PyTorch device backend, ``torch.device("tiny")``.

Importing this package renames PyTorch's PrivateUse1 backend to "tiny",
loads the native extension (which registers the ATen kernels, the allocator,
the device guard and the generator) and installs ``torch.tiny``.
"""


def _autoload():
    """Entry point for PyTorch's ``torch.backends`` autoloading: importing is all it takes.

    Defined before ``import torch`` because that import may autoload this
    package while it is still initializing.
    """


import torch  # noqa: E402

if torch._C._get_privateuse1_backend_name() != "tiny":
    torch.utils.rename_privateuse1_backend("tiny")

from . import _C  # noqa: E402  (registers the kernels)
from . import device as _device_module  # noqa: E402
from . import debug  # noqa: E402,F401
from . import distributed  # noqa: E402

distributed.register()

if not hasattr(torch, "tiny"):
    torch._register_device_module("tiny", _device_module)
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)


__all__ = ["debug", "distributed"]
