"""Small helpers Accelerate's ``accelerate.utils`` offers that no micro-package needs itself,
and its TPU / SageMaker entry points, which accel refuses with the reason.

They live in the facade because only scripts written for Accelerate call them; each is
re-exported from the module path Accelerate has it on.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any, NoReturn

from accel_launch.config_classes import SAGEMAKER_REFUSAL
from accel_launch.tpu_command import TPU_REFUSAL
from accel_state.errors import ConfigurationError

__all__ = ["SAGEMAKER_REFUSAL", "TPU_REFUSAL", "are_libraries_initialized",
           "get_fsdp2_grad_scaler", "get_free_port", "get_grad_scaler", "get_pretty_name",
           "install_xla", "merge_dicts", "prepare_sagemager_args_inputs", "prepare_tpu"]


def are_libraries_initialized(*library_names: str) -> list[str]:
    """Those of ``library_names`` already imported in this process."""
    return [name for name in library_names if name in sys.modules]


def get_pretty_name(obj: Any) -> str:
    """A readable name for a class, function or instance (its class's name)."""
    if not hasattr(obj, "__qualname__") and not hasattr(obj, "__name__"):
        obj = getattr(obj, "__class__", obj)
    return str(getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or obj)


def merge_dicts(source: dict, destination: dict) -> dict:
    """Merge ``source`` into ``destination`` in place, nested dicts key by key."""
    for key, value in source.items():
        if isinstance(value, dict):
            merge_dicts(value, destination.setdefault(key, {}))
        else:
            destination[key] = value
    return destination


def env_var_path_add(env_var_name: str, path_to_add: Any) -> str:
    """The ``:``-separated value of ``env_var_name`` with ``path_to_add`` appended, for a
    child process's environment (Accelerate's helper, used for ``PYTHONPATH``-like
    variables); returns the new value and sets nothing."""
    paths = [p for p in os.environ.get(env_var_name, "").split(":") if p]
    paths.append(str(path_to_add))
    return ":".join(paths)


def get_free_port() -> int:
    """A TCP port on this host that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def get_grad_scaler(distributed_type: Any = None, **kwargs: Any) -> Any:
    """A ``torch.amp.GradScaler`` for this process's device. FSDP runs as FSDP2 in accel, whose
    sharded parameters work with the plain scaler, so ``distributed_type`` changes nothing."""
    import torch
    from accel_state import PartialState

    return torch.amp.GradScaler(PartialState().device.type, **kwargs)


def get_fsdp2_grad_scaler(**kwargs: Any) -> Any:
    """Accelerate's FSDP2 scaler: the plain ``torch.amp.GradScaler`` of :func:`get_grad_scaler`."""
    return get_grad_scaler(**kwargs)


def install_xla(upgrade: bool = False) -> NoReturn:
    """Accelerate installs torch_xla on Colab; accel does not run on TPUs."""
    raise ConfigurationError(f"install_xla(upgrade={upgrade!r}) is refused: {TPU_REFUSAL}")


def prepare_tpu(*args: Any, **kwargs: Any) -> NoReturn:
    """Accelerate's TPU launch environment: refused."""
    raise ConfigurationError(f"prepare_tpu() is refused: {TPU_REFUSAL}")


def prepare_sagemager_args_inputs(*args: Any, **kwargs: Any) -> NoReturn:
    """Accelerate's SageMaker launch arguments (its spelling): refused."""
    raise ConfigurationError(f"prepare_sagemager_args_inputs() is refused: {SAGEMAKER_REFUSAL}")


#: accel never runs torch_xla, whatever USE_TORCH_XLA says
USE_TORCH_XLA = False


def is_torch_distributed_available() -> bool:
    """Whether this torch build has ``torch.distributed``."""
    import torch.distributed

    return bool(torch.distributed.is_available())


def is_tqdm_available() -> bool:
    from accel_state.imports import is_package_available

    return is_package_available("tqdm")


def is_repeated_blocks(module: Any) -> bool:
    """A non-empty ``nn.ModuleList`` whose children share one class (regional compilation)."""
    import torch

    return (isinstance(module, torch.nn.ModuleList) and len(module) > 0
            and all(isinstance(m, type(module[0])) for m in module))


def has_repeated_blocks(module: Any) -> bool:
    """Whether ``module`` holds a repeated block at any depth."""
    return any(is_repeated_blocks(sub) for sub in module.modules())


def check_device_same(first: Any, second: Any) -> bool:
    """Same device, reading a bare accelerator type as its index 0 (``cuda`` == ``cuda:0``)."""
    import torch

    first, second = torch.device(first), torch.device(second)
    if first.type != second.type:
        return False
    return (first.index or 0) == (second.index or 0) if first.type != "cpu" else True


def is_torch_xpu_tensor(tensor: Any) -> bool:
    """A tensor that lives on an Intel XPU."""
    import torch

    return isinstance(tensor, torch.Tensor) and tensor.device.type == "xpu"


def do_nothing(*args: Any, **kwargs: Any) -> None:
    """Accelerate's no-op placeholder."""


class MpDeviceLoaderWrapper:
    """Accelerate's torch_xla device loader: refused (TPU)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise ConfigurationError(f"MpDeviceLoaderWrapper(...) is refused: {TPU_REFUSAL}")


def _tensor_type_codes() -> dict:
    import torch

    return {torch.float: 1, torch.double: 2, torch.half: 3, torch.bfloat16: 4, torch.uint8: 5,
            torch.int8: 6, torch.int16: 7, torch.int32: 8, torch.int64: 9, torch.bool: 10}


#: dtype <-> small integer, as Accelerate sends dtypes between processes
TENSOR_TYPE_TO_INT = _tensor_type_codes()
TENSOR_INT_TO_DTYPE = {code: dtype for dtype, code in TENSOR_TYPE_TO_INT.items()}

def gather_tensor_shape(tensor: Any) -> tuple[Any, int]:
    """``(shape, dtype code)`` of the tensor that one process passes (``None`` elsewhere),
    on every process: the shape as a 1-D int tensor on this process's device, the dtype as
    its :data:`TENSOR_TYPE_TO_INT` code. Every process must call it (one collective)."""
    import torch
    from accel_state import PartialState
    from accel_state.errors import DistributedError
    from accel_state.operations import gather_object

    state = PartialState()
    mine = None if tensor is None else (list(tensor.shape), TENSOR_TYPE_TO_INT[tensor.dtype])
    every = gather_object([mine]) if state.num_processes > 1 else [mine]
    found = [info for info in every if info is not None]
    if not found:
        raise DistributedError("gather_tensor_shape got None on every process: pass the "
                               "tensor on the process that has it.")
    shape, code = found[0]
    return torch.tensor(shape, dtype=torch.int, device=state.device), code


__all__ += ["USE_TORCH_XLA", "gather_tensor_shape", "is_torch_distributed_available", "is_tqdm_available",
            "is_repeated_blocks", "has_repeated_blocks", "check_device_same",
            "is_torch_xpu_tensor", "do_nothing", "MpDeviceLoaderWrapper", "TENSOR_TYPE_TO_INT",
            "TENSOR_INT_TO_DTYPE"]
