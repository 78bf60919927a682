"""``torch.tiny``: the device module PyTorch expects of a PrivateUse1 backend."""

import torch

from . import _C
from . import compile as _compile

_current = 0
# Read by torch.utils.checkpoint (as torch.cuda._initialized) to decide whether to save and
# restore this device's RNG state around a recomputation: tiny is always initialized.
_initialized = True


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> int:
    return _current


def set_device(device) -> None:
    _check_index(device)


def synchronize(device=None) -> None:
    """Runs all pending work: every storage with a lazy value is realized, and waits for the device."""
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


def get_rng_state_all() -> list:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def is_initialized() -> bool:
    return True


def _lazy_init() -> None:
    pass


def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16]


# ---------------------------------------------------------------- which device computes


def get_backend() -> str:
    """What tiny computes on: ``"cuda"`` (a GPU), ``"cpu"`` or ``"cuda-emu"`` (the emulated GPU).

    Chosen once per process by ``TINY_DEVICE`` (``cpu``, ``cuda``, ``cuda-emu``); unset, a usable
    GPU is taken when there is one. Asking for ``cuda`` without one raises an error saying why.
    """
    return _C._backend()


class _DeviceProperties:
    """What ``torch.cuda.get_device_properties`` gives, for the device tiny computes on."""

    def __init__(self, p: dict):
        self.name = p["name"]
        self.backend = p["backend"]
        self.arch = p["arch"]
        self.major = p["major"]
        self.minor = p["minor"]
        self.multi_processor_count = p["multi_processor_count"]
        self.total_memory = p["total_memory"]
        self.vector_bits = p["vector_bits"]

    def __repr__(self):
        extra = (f"major={self.major}, minor={self.minor}, " if self.backend != "cpu"
                 else f"vector_bits={self.vector_bits}, ")
        return (f"_TinyDeviceProperties(name='{self.name}', backend='{self.backend}', arch='{self.arch}', {extra}"
                f"total_memory={self.total_memory // (1 << 20)}MB, multi_processor_count={self.multi_processor_count})")


def get_device_properties(device=None) -> _DeviceProperties:
    _check_index(device)
    return _DeviceProperties(_C._device_properties())


def get_device_name(device=None) -> str:
    return get_device_properties(device).name


def get_device_capability(device=None) -> tuple:
    p = get_device_properties(device)
    return (p.major, p.minor)


class _MatmulSettings:
    """``torch.tiny.matmul``, as ``torch.backends.cuda.matmul``: ``allow_tf32`` lets float32
    matmuls and convolutions round their factors to TF32 on a GPU's tensor cores (about 10
    mantissa bits, several times faster). It is PyTorch's own switch, the one
    ``torch.backends.cuda.matmul.allow_tf32`` and ``torch.set_float32_matmul_precision("high")``
    set, read when an op is called; off by default. The CPU computes float32 exactly either way.
    """

    @property
    def allow_tf32(self) -> bool:
        return torch._C._get_cublas_allow_tf32()

    @allow_tf32.setter
    def allow_tf32(self, value: bool) -> None:
        torch._C._set_cublas_allow_tf32(bool(value))


matmul = _MatmulSettings()


def _check_index(device) -> None:
    idx = _get_device_index(device)
    if idx != 0:
        raise RuntimeError(f"tiny: invalid device index {idx}; only tiny:0 exists")


# ---------------------------------------------------------------- memory (the caching allocator's figures)


def memory_stats(device=None) -> dict:
    """The caching allocator's statistics, under the keys ``torch.cuda.memory_stats`` uses."""
    _check_index(device)
    s = _C._memory_stats()
    return {
        "allocated_bytes.all.current": s["allocated"],
        "allocated_bytes.all.peak": s["peak_allocated"],
        "reserved_bytes.all.current": s["reserved"],
        "reserved_bytes.all.peak": s["peak_reserved"],
        "allocation.all.allocated": s["allocations"],
        "allocation.all.freed": s["frees"],
        "allocation.all.current": s["allocations"] - s["frees"],
        "segment.all.allocated": s["device_allocations"],
        "num_alloc_retries": s["cache_flushes"],
        "num_ooms": s["ooms"],
    }


def memory_allocated(device=None) -> int:
    """Bytes held by live tiny buffers (values computed so far; lazy values take none)."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None) -> int:
    """Bytes taken from the device: live buffers plus blocks cached for reuse."""
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None) -> None:
    _check_index(device)
    _C._reset_peak_memory_stats()


def reset_max_memory_allocated(device=None) -> None:
    reset_peak_memory_stats(device)


def empty_cache() -> None:
    """Gives the blocks cached for reuse back to the device."""
    _C._empty_cache()


def mem_get_info(device=None) -> tuple:
    """(free, total) bytes of the device's memory (the host's, on the CPU)."""
    _check_index(device)
    return tuple(_C._mem_get_info())


# ---------------------------------------------------------------- streams and events
# tiny orders its work itself (one lazy graph, one device queue): a Stream is that
# queue, and an Event marks a point in it. Recording an event launches what is pending,
# so elapsed_time measures the work between two events.


class Stream:
    """The device's one queue, shaped like ``torch.cuda.Stream``."""

    def __init__(self, device=None, priority: int = 0, **kwargs):
        _check_index(device)
        self.device = torch.device("tiny", 0)
        self.priority = priority

    def synchronize(self) -> None:
        synchronize()

    def query(self) -> bool:
        synchronize()
        return True

    def wait_event(self, event) -> None:
        pass  # one queue: work recorded before the event is already ahead of this stream's

    def wait_stream(self, stream) -> None:
        pass

    def record_event(self, event=None):
        event = event if event is not None else Event()
        event.record(self)
        return event

    def __eq__(self, other):
        return isinstance(other, Stream)

    def __hash__(self):
        return hash("tiny-stream")

    def __repr__(self):
        return "<torch.tiny.Stream device=tiny:0>"


_STREAM = None


def default_stream(device=None) -> Stream:
    global _STREAM
    if _STREAM is None:
        _STREAM = Stream(device)
    return _STREAM


def current_stream(device=None) -> Stream:
    return default_stream(device)


def set_stream(stream) -> None:
    pass


class stream:
    """Context manager selecting a stream (there is one)."""

    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        return self.stream

    def __exit__(self, *args):
        return False


class Event:
    """A point in tiny's work, as ``torch.cuda.Event`` is. ``record`` launches what is pending and
    marks its end in the device's queue without waiting: a CUDA event on a GPU, timed by the GPU;
    on the CPU, where launching runs the work, the clock once it has run."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self._event = None

    def record(self, stream=None) -> None:
        self._event = _C._record_event()

    def wait(self, stream=None) -> None:
        pass  # one queue: work launched after this call already runs after the event

    def query(self) -> bool:
        """True when the work before the event has finished (or the event was never recorded)."""
        return self._event is None or self._event.complete()

    def synchronize(self) -> None:
        if self._event is not None:
            self._event.wait()

    def elapsed_time(self, end_event) -> float:
        """Milliseconds from this event to ``end_event`` (both recorded with enable_timing=True)."""
        if not (self.enable_timing and end_event.enable_timing):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        if self._event is None or end_event._event is None:
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        return self._event.ms_until(end_event._event)


# ---------------------------------------------------------------- torch.compile
_INDUCTOR_CODEGENS = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")


def __getattr__(name):
    # Inductor looks for a device's code generators on its device module; tiny's refuse, naming
    # torch.compile(backend="tiny"). Looked up lazily: Inductor is loaded only then.
    if name in _INDUCTOR_CODEGENS:
        return _compile.inductor_codegen()
    raise AttributeError(f"module 'torch.tiny' has no attribute {name!r}")
