"""Seeding, cross-process RNG synchronisation, and RNG state capture for exact resume.

``set_seed`` / ``synchronize_rng_state(s)`` / ``RNGType`` follow
``accelerate.utils.random``. ``capture_rng_state`` / ``restore_rng_state`` are ours:
they snapshot every generator a training step can touch (Python, NumPy's global one,
torch's CPU one and each accelerator's) as tensors plus plain scalars, so a checkpoint
can store the tensors in safetensors and the rest in JSON, and resume bit for bit.
"""

from __future__ import annotations

import random as _py_random
import sys
import warnings
from collections.abc import Iterable
from typing import Any

import torch

from accel_state import env
from accel_state.enums import BaseEnum
from accel_state.errors import ConfigurationError, MissingDependencyError

__all__ = [
    "RNGType",
    "set_seed",
    "synchronize_rng_state",
    "synchronize_rng_states",
    "capture_rng_state",
    "restore_rng_state",
]

# Accelerator modules that follow torch.cuda's RNG API (get/set_rng_state[_all], manual_seed_all).
_ACCELERATORS = ("cuda", "xpu", "npu", "mlu", "musa", "sdaa", "hpu")
# cuBLAS needs this for deterministic matmuls (CUDA >= 10.2); see torch's reproducibility notes.
_CUBLAS_DETERMINISTIC = ":4096:8"


class RNGType(BaseEnum):
    """Which random number generator to synchronise across processes."""

    TORCH = "torch"
    CUDA = "cuda"
    MLU = "mlu"
    SDAA = "sdaa"
    MUSA = "musa"
    NPU = "npu"
    XLA = "xla"
    XPU = "xpu"
    HPU = "hpu"
    NEURON = "neuron"
    GENERATOR = "generator"


def _accelerator_module(name: str) -> Any:
    """``torch.<name>`` when that device type is present, else ``None`` (imports nothing)."""
    module = getattr(torch, name, None)
    if module is None or not hasattr(module, "is_available"):
        return None
    try:
        return module if module.is_available() else None
    except RuntimeError:  # a half-installed plugin
        return None


def _global_rank() -> int:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return env.RANK.get_int(0) or 0


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seed Python's ``random``, NumPy (when installed), torch and every present accelerator.

    ``device_specific`` adds the global rank to ``seed`` so processes draw different
    numbers. ``deterministic`` makes torch use deterministic algorithms (and cuDNN
    deterministic, non-benchmarking kernels), erroring on ops that have none.
    """
    if device_specific:
        seed += _global_rank()
    _py_random.seed(seed)
    numpy = _numpy()
    if numpy is not None:
        numpy.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # CPU, and (lazily) CUDA, MPS, XPU and plug-in devices
    torch.cuda.manual_seed_all(seed)  # lazy: safe without CUDA
    for name in _ACCELERATORS[1:]:
        module = _accelerator_module(name)
        if module is not None and hasattr(module, "manual_seed_all"):
            module.manual_seed_all(seed)
    if "torch_xla" in sys.modules:
        import torch_xla.core.xla_model as xm

        xm.set_rng_state(seed)
    if deterministic:
        _enable_deterministic()


def _enable_deterministic() -> None:
    if not env.CUBLAS_WORKSPACE_CONFIG.is_set():
        env.CUBLAS_WORKSPACE_CONFIG.set(_CUBLAS_DETERMINISTIC)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


# --- synchronisation across processes ------------------------------------------------------

def _rng_type(value: Any) -> RNGType:
    try:
        return RNGType(str(value).lower() if not isinstance(value, RNGType) else value)
    except ValueError:
        raise ConfigurationError(
            f"Unknown RNG type {value!r}: use one of {', '.join(RNGType.list())}.") from None


def _xla_model(rng_type: RNGType) -> Any:
    try:
        import torch_xla.core.xla_model as xm
    except ImportError:
        raise MissingDependencyError("torch_xla", feature=f"synchronising the {rng_type} RNG",
                                     package="torch_xla") from None
    return xm


def _device_module(rng_type: RNGType) -> Any:
    module = _accelerator_module(rng_type.value)
    if module is None:
        raise ConfigurationError(
            f"Cannot synchronise the {rng_type.value!r} RNG: no {rng_type.value.upper()} device "
            f"is available in this environment. Drop {rng_type.value!r} from rng_types.")
    return module


def _get_state(rng_type: RNGType, generator: torch.Generator | None) -> torch.Tensor:
    if rng_type is RNGType.TORCH:
        return torch.get_rng_state()
    if rng_type is RNGType.GENERATOR:
        if generator is None:
            raise ConfigurationError("rng_type 'generator' needs the generator to synchronise: "
                                     "pass generator=<torch.Generator>.")
        return generator.get_state()
    if rng_type in (RNGType.XLA, RNGType.NEURON):
        return torch.tensor(_xla_model(rng_type).get_rng_state())
    return _device_module(rng_type).get_rng_state()


def _set_state(rng_type: RNGType, state: torch.Tensor, generator: torch.Generator | None) -> None:
    if rng_type is RNGType.TORCH:
        torch.set_rng_state(state)
    elif rng_type is RNGType.GENERATOR:
        generator.set_state(state)  # type: ignore[union-attr]
    elif rng_type in (RNGType.XLA, RNGType.NEURON):
        _xla_model(rng_type).set_rng_state(int(state.item()))
    else:
        _device_module(rng_type).set_rng_state(state)


def synchronize_rng_state(rng_type: RNGType | str | None = None,
                          generator: torch.Generator | None = None) -> None:
    """Give every process rank 0's state of one RNG.

    ``rng_type=None`` means the generator when one is given, else torch's global RNG.
    """
    if rng_type is None:
        rng_type = RNGType.GENERATOR if generator is not None else RNGType.TORCH
    rng_type = _rng_type(rng_type)
    state = _get_state(rng_type, generator)
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    from accel_state.groups import _collective_device

    device = _collective_device()
    if rng_type in (RNGType.XLA, RNGType.NEURON):
        device = _xla_model(rng_type).xla_device()
    shared = state.to(device)
    dist.broadcast(shared, src=0)
    _set_state(rng_type, shared.cpu(), generator)


def synchronize_rng_states(rng_types: Iterable[RNGType | str],
                           generator: torch.Generator | None = None) -> None:
    """:func:`synchronize_rng_state` for each of ``rng_types``, in order."""
    for rng_type in rng_types:
        synchronize_rng_state(_rng_type(rng_type), generator=generator)


# --- capture / restore for checkpoints -----------------------------------------------------

def _is_in_use(module: Any) -> bool:
    """Only initialised devices are captured: an untouched generator needs no saving."""
    is_initialized = getattr(module, "is_initialized", None)
    return bool(is_initialized()) if callable(is_initialized) else True


def capture_rng_state() -> dict[str, Any]:
    """Snapshot of every RNG state of this process, as tensors and plain scalars.

    Keys (each present only when that generator exists here):
    ``python`` -> ``{"version": int, "state": int64 tensor[625], "gauss_next": float|None}``;
    ``numpy`` -> ``{"bit_generator": str, "key": int64 tensor[624], "pos": int,
    "has_gauss": int, "cached_gaussian": float}``; ``torch`` -> uint8 tensor;
    ``cuda``/``xpu``/``npu``/... -> list of uint8 tensors, one per device; ``mps`` ->
    uint8 tensor; ``xla`` -> int.
    """
    version, internal, gauss_next = _py_random.getstate()
    state: dict[str, Any] = {
        "python": {"version": version, "state": torch.tensor(internal, dtype=torch.int64),
                   "gauss_next": gauss_next},
        "torch": torch.get_rng_state(),
    }
    numpy = _numpy()
    if numpy is not None:
        name, key, pos, has_gauss, cached = numpy.random.get_state()
        state["numpy"] = {"bit_generator": str(name),
                          "key": torch.from_numpy(key.astype(numpy.int64)),
                          "pos": int(pos), "has_gauss": int(has_gauss),
                          "cached_gaussian": float(cached)}
    for name in _ACCELERATORS:
        module = _accelerator_module(name)
        if module is not None and _is_in_use(module) and hasattr(module, "get_rng_state_all"):
            state[name] = list(module.get_rng_state_all())
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        state["mps"] = torch.mps.get_rng_state()
    if "torch_xla" in sys.modules:
        import torch_xla.core.xla_model as xm

        state["xla"] = int(xm.get_rng_state())
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put back the states of :func:`capture_rng_state`.

    Generators absent from ``state`` are left alone; an accelerator saved in ``state``
    but missing here is skipped with a warning (e.g. resuming a GPU run on CPU).
    """
    if "python" in state:
        py = state["python"]
        internal = tuple(int(x) for x in _as_list(py["state"]))
        _py_random.setstate((int(py["version"]), internal, py["gauss_next"]))
    if "torch" in state:
        torch.set_rng_state(_as_byte_tensor(state["torch"]))
    if "numpy" in state:
        _restore_numpy(state["numpy"])
    for name in _ACCELERATORS:
        if name in state:
            _restore_accelerator(name, state[name])
    if "mps" in state:
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            torch.mps.set_rng_state(_as_byte_tensor(state["mps"]))
        else:
            _warn_missing("mps")
    if "xla" in state:
        if "torch_xla" in sys.modules or _xla_installed():
            import torch_xla.core.xla_model as xm

            xm.set_rng_state(int(state["xla"]))
        else:
            _warn_missing("xla")


def _restore_numpy(saved: dict[str, Any]) -> None:
    numpy = _numpy()
    if numpy is None:
        _warn_missing("numpy")
        return
    key = numpy.asarray(_as_list(saved["key"]), dtype=numpy.uint32)
    numpy.random.set_state((saved["bit_generator"], key, int(saved["pos"]),
                            int(saved["has_gauss"]), float(saved["cached_gaussian"])))


def _restore_accelerator(name: str, states: Any) -> None:
    module = _accelerator_module(name)
    if module is None:
        _warn_missing(name)
        return
    states = [states] if isinstance(states, torch.Tensor) else list(states)
    count = module.device_count()
    if len(states) != count:
        warnings.warn(f"The saved RNG states cover {len(states)} {name} device(s) but "
                      f"{count} are visible; restoring the first {min(count, len(states))}.",
                      stacklevel=3)
    for index, device_state in enumerate(states[:count]):
        module.set_rng_state(_as_byte_tensor(device_state), index)


def _as_list(value: Any) -> list[Any]:
    return value.tolist() if hasattr(value, "tolist") else list(value)


def _as_byte_tensor(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", torch.uint8)
    return torch.tensor(_as_list(value), dtype=torch.uint8)


def _xla_installed() -> bool:
    from accel_state.imports import is_package_available

    return is_package_available("torch_xla")


def _warn_missing(name: str) -> None:
    warnings.warn(f"The saved RNG state includes {name!r}, which is not available in this "
                  "environment; that part is not restored, so random draws on it will differ "
                  "from the original run.", stacklevel=3)
