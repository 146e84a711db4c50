"""Availability probes and lazy imports of optional packages.

Probes read package metadata (cheap, imports nothing); :func:`require` imports a
module on first use and turns a missing one into :class:`MissingDependencyError`
with the exact install line (DESIGN.md §6).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import operator
from types import ModuleType

from packaging.version import Version

from accel_state.errors import ConfigurationError, MissingDependencyError

__all__ = ["is_package_available", "package_version", "require", "compare_versions",
           "is_torch_version", "is_cuda_available", "is_mps_available", "is_xpu_available",
           "is_npu_available", "is_bf16_available", "is_fp16_available", "is_numpy_available",
           "is_deepspeed_available", "is_torchao_available", "is_transformer_engine_available",
           "is_safetensors_available", "is_wandb_available", "is_tensorboard_available",
           "is_mlflow_available", "is_rich_available", "is_torchdata_available"]

_OPERATORS = {">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
              "<=": operator.le, "<": operator.lt}


@functools.lru_cache(None)
def is_package_available(module: str, *dists: str) -> bool:
    """True when ``module`` can be imported and (if given) one of ``dists`` is installed."""
    if importlib.util.find_spec(module) is None:
        return False
    if not dists:
        return True
    return any(package_version(d) is not None for d in dists)


def package_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def require(module: str, *, extra: str | None = None, feature: str | None = None,
            package: str | None = None, dist: str = "accel") -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependencyError` naming the install command."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        if error.name is not None and not module.startswith(error.name.split(".")[0]):
            raise  # the package is there but one of *its* imports failed: show the real error
        raise MissingDependencyError(package or module, extra=extra, feature=feature,
                                     dist=dist) from error


def compare_versions(library_or_version: str | Version, operation: str,
                     requirement_version: str) -> bool:
    """``compare_versions("torch", ">=", "2.4")`` or with a version string/object."""
    if operation not in _OPERATORS:
        raise ConfigurationError(
            f"Unknown comparison {operation!r}; use one of {', '.join(_OPERATORS)}."
        )
    version = library_or_version
    if isinstance(version, str) and not version[:1].isdigit():
        found = package_version(version)
        if found is None:
            raise MissingDependencyError(version)
        version = found
    return _OPERATORS[operation](Version(str(version)), Version(requirement_version))


def is_torch_version(operation: str, version: str) -> bool:
    import torch

    return compare_versions(Version(torch.__version__).base_version, operation, version)


def is_cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def is_mps_available() -> bool:
    import torch

    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def is_xpu_available() -> bool:
    import torch

    return bool(hasattr(torch, "xpu") and torch.xpu.is_available())


def is_npu_available() -> bool:
    if not is_package_available("torch_npu"):
        return False
    import torch

    return bool(hasattr(torch, "npu") and torch.npu.is_available())


def is_bf16_available(ignore_tpu: bool = False) -> bool:
    """bf16 autocast works on CPU everywhere; on CUDA it needs hardware support."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return True


def is_fp16_available() -> bool:
    import torch

    return torch.cuda.is_available() or is_xpu_available() or is_npu_available()


def _dist_probe(module: str, *dists: str):  # noqa: ANN202 - small factory of probes
    def probe() -> bool:
        return is_package_available(module, *dists)

    probe.__name__ = f"is_{module}_available"
    probe.__doc__ = f"Whether {module!r} is installed (reads metadata; imports nothing)."
    return probe


is_numpy_available = _dist_probe("numpy")
is_safetensors_available = _dist_probe("safetensors")
is_deepspeed_available = _dist_probe("deepspeed", "deepspeed")
is_torchao_available = _dist_probe("torchao", "torchao")
is_transformer_engine_available = _dist_probe("transformer_engine", "transformer-engine",
                                              "transformer_engine")
is_wandb_available = _dist_probe("wandb")
is_tensorboard_available = _dist_probe("tensorboard")
is_mlflow_available = _dist_probe("mlflow", "mlflow", "mlflow-skinny")
is_rich_available = _dist_probe("rich")
is_torchdata_available = _dist_probe("torchdata")
