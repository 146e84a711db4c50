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
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from accel_state.errors import ConfigurationError, MissingDependencyError

if TYPE_CHECKING:  # packaging is imported at the first comparison, not with every accel import
    from packaging.version import Version

__all__ = ["is_package_available", "package_version", "require", "compare_versions",
           "is_torch_version", "is_cuda_available", "is_mps_available", "is_xpu_available",
           "is_npu_available", "is_bf16_available", "is_fp16_available", "is_numpy_available",
           "is_deepspeed_available", "is_torchao_available", "is_transformer_engine_available",
           "is_safetensors_available", "is_wandb_available", "is_tensorboard_available",
           "is_mlflow_available", "is_rich_available", "is_torchdata_available",
           # the rest of Accelerate's probes (accelerate.utils.imports)
           "is_mlu_available", "is_musa_available", "is_sdaa_available", "is_hpu_available",
           "is_habana_gaudi1", "is_neuron_available", "is_torch_xla_available",
           "is_rocm_available", "is_xccl_available", "is_fp8_available", "is_bnb_available",
           "is_4bit_bnb_available", "is_8bit_bnb_available",
           "is_bitsandbytes_multi_backend_available", "is_megatron_lm_available",
           "is_transformer_engine_mxfp8_available", "is_msamp_available", "is_pippy_available",
           "is_lomo_available", "is_schedulefree_available", "is_triton_available",
           "is_transformers_available", "is_datasets_available", "is_peft_available",
           "is_timm_available", "is_torchvision_available",
           "is_torchdata_stateful_dataloader_available", "is_pandas_available",
           "is_matplotlib_available", "is_pytest_available", "is_boto3_available",
           "is_sagemaker_available", "is_pynvml_available", "is_amdsmi_available",
           "is_import_timer_available", "is_weights_only_available", "torchao_required",
           "is_peft_model"]

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
    from packaging.version import Version

    return _OPERATORS[operation](Version(str(version)), Version(requirement_version))


def is_torch_version(operation: str, version: str) -> bool:
    import torch
    from packaging.version import Version

    return compare_versions(Version(torch.__version__).base_version, operation, version)


def is_cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def is_mps_available(min_version: str = "1.12") -> bool:
    """Apple's MPS backend is built and usable, on torch >= ``min_version``."""
    import torch

    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and is_torch_version(">=", min_version)
                and backend.is_built() and backend.is_available())


def _torch_device_backend(attr: str, check_device: bool) -> bool:
    """torch's ``attr`` backend is usable; ``check_device`` also asks it to count devices
    (a driver error then means "no device" rather than an exception)."""
    import torch

    backend = getattr(torch, attr, None)
    if backend is None:
        return False
    if check_device:
        try:
            return bool(backend.device_count() > 0 and backend.is_available())
        except RuntimeError:
            return False
    return bool(backend.is_available())


def is_xpu_available(check_device: bool = False) -> bool:
    """Intel GPUs through stock torch's ``torch.xpu``."""
    return _torch_device_backend("xpu", check_device)


def is_npu_available(check_device: bool = False) -> bool:
    """Ascend NPUs: ``torch_npu`` installed and importable (``check_device``: and a device)."""
    if not is_package_available("torch_npu"):
        return False
    try:
        importlib.import_module("torch_npu")
    except Exception:  # noqa: BLE001 - a broken vendor install means "no NPU", as in Accelerate
        return False
    return _torch_device_backend("npu", check_device)


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


def _installed_at_least(dist: str, min_version: str) -> bool:
    """Distribution ``dist`` is installed at ``min_version`` or newer (metadata only)."""
    version = package_version(dist)
    return version is not None and compare_versions(version, ">=", min_version)


def is_numpy_available(min_version: str = "1.25.0") -> bool:
    """numpy installed at ``min_version`` or newer (reads metadata; imports nothing)."""
    return _installed_at_least("numpy", min_version)


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


# --- the rest of Accelerate's probes. Device probes never initialise CUDA (fork-safety):
# they read metadata, or ask a vendor extension only when it is installed.

is_msamp_available = _dist_probe("msamp")
is_megatron_lm_available = _dist_probe("megatron", "megatron-core", "megatron_core")
is_lomo_available = _dist_probe("lomo_optim", "lomo-optim", "lomo_optim")
is_schedulefree_available = _dist_probe("schedulefree")
is_triton_available = _dist_probe("triton")
is_transformers_available = _dist_probe("transformers", "transformers")
is_datasets_available = _dist_probe("datasets", "datasets")
is_peft_available = _dist_probe("peft", "peft")
is_timm_available = _dist_probe("timm", "timm")
is_torchvision_available = _dist_probe("torchvision", "torchvision")
is_pandas_available = _dist_probe("pandas", "pandas")
is_matplotlib_available = _dist_probe("matplotlib", "matplotlib")
is_pytest_available = _dist_probe("pytest", "pytest")
is_boto3_available = _dist_probe("boto3", "boto3")
is_sagemaker_available = _dist_probe("sagemaker", "sagemaker")
is_pynvml_available = _dist_probe("pynvml")
is_amdsmi_available = _dist_probe("amdsmi")
is_import_timer_available = _dist_probe("import_timer")


def _vendor_device(module: str, attr: str, check_device: bool) -> bool:
    """A vendor's torch extension is installed (and, with ``check_device``, sees a device)."""
    if not is_package_available(module):
        return False
    if not check_device:
        return True
    importlib.import_module(module)
    import torch

    backend = getattr(torch, attr, None)
    return bool(backend is not None and backend.is_available())


def is_mlu_available(check_device: bool = False) -> bool:
    return _vendor_device("torch_mlu", "mlu", check_device)


def is_musa_available(check_device: bool = False) -> bool:
    return _vendor_device("torch_musa", "musa", check_device)


def is_sdaa_available(check_device: bool = False) -> bool:
    return _vendor_device("torch_sdaa", "sdaa", check_device)


def is_hpu_available(init_hccl: bool = False) -> bool:
    """Intel Gaudi: ``habana_frameworks`` installed (``init_hccl`` also loads its collectives)."""
    if not is_package_available("habana_frameworks"):
        return False
    importlib.import_module("habana_frameworks.torch")
    if init_hccl:
        importlib.import_module("habana_frameworks.torch.distributed.hccl")
    import torch

    return bool(hasattr(torch, "hpu") and torch.hpu.is_available())


def is_habana_gaudi1() -> bool:
    """Whether the Gaudi device is a first-generation one (it lacks some dtypes)."""
    if not is_hpu_available():
        return False
    htexp = importlib.import_module("habana_frameworks.torch.utils.experimental")
    return bool(htexp._get_device_type() == htexp.synDeviceType.synDeviceGaudi)


def is_neuron_available(check_device: bool = False) -> bool:
    """AWS Trainium/Inferentia: ``torch_neuronx`` installed."""
    return _vendor_device("torch_neuronx", "neuron", check_device)


def is_torch_xla_available(check_is_tpu: bool = False, check_is_gpu: bool = False) -> bool:
    """torch_xla installed; with a check, its runtime also reports that device type."""
    if not is_package_available("torch_xla"):
        return False
    if not (check_is_tpu or check_is_gpu):
        return True
    runtime = importlib.import_module("torch_xla.runtime")
    kind = runtime.device_type()
    return (check_is_tpu and kind == "TPU") or (check_is_gpu and kind in ("GPU", "CUDA"))


def is_rocm_available() -> bool:
    """A ROCm (HIP) build of torch: its build flag, no device query."""
    import torch

    return getattr(torch.version, "hip", None) is not None


def is_xccl_available() -> bool:
    """torch's XCCL backend (Intel GPUs) is built in."""
    import torch.distributed as dist

    check = getattr(dist, "is_xccl_available", None)
    return bool(dist.is_available() and check is not None and check())


def is_fp8_available() -> bool:
    """One of the fp8 backends (Transformer Engine, MS-AMP, torchao) is installed."""
    return is_transformer_engine_available() or is_msamp_available() or is_torchao_available()


def is_transformer_engine_mxfp8_available() -> bool:
    """Transformer Engine is installed and says this GPU runs MXFP8 block scaling."""
    if not is_transformer_engine_available():
        return False
    fp8 = importlib.import_module("transformer_engine.pytorch.fp8")
    return bool(fp8.check_mxfp8_support()[0])


def is_bnb_available(min_version: str | None = None) -> bool:
    """bitsandbytes installed (and at least ``min_version`` when given)."""
    if not is_package_available("bitsandbytes", "bitsandbytes"):  # importable, with metadata
        return False
    return min_version is None or _installed_at_least("bitsandbytes", min_version)


def is_4bit_bnb_available() -> bool:
    return is_bnb_available("0.39.0")


def is_8bit_bnb_available() -> bool:
    return is_bnb_available("0.37.2")


def is_bitsandbytes_multi_backend_available() -> bool:
    """bitsandbytes built with its multi-backend (non-CUDA) support."""
    if not is_bnb_available():
        return False
    bnb = importlib.import_module("bitsandbytes")
    return "multi_backend" in getattr(bnb, "features", set())


def is_pippy_available() -> bool:
    """Pipeline inference uses ``torch.distributed.pipelining`` (torch >= 2.4)."""
    return is_torch_version(">=", "2.4.0")


def is_weights_only_available() -> bool:
    """``torch.load(weights_only=True)`` with allow-listed globals (torch >= 2.4)."""
    return is_torch_version(">=", "2.4.0")


def is_torchdata_stateful_dataloader_available() -> bool:
    """torchdata's ``StatefulDataLoader`` (torchdata >= 0.8.0)."""
    return _installed_at_least("torchdata", "0.8.0")


def is_peft_model(model: Any) -> bool:
    """Whether ``model`` is a peft ``PeftModel``. Never imports peft: a model cannot be one
    unless peft was imported already, so an unimported peft answers False at no cost."""
    peft = sys.modules.get("peft")
    peft_model = getattr(peft, "PeftModel", None)
    return isinstance(peft_model, type) and isinstance(model, peft_model)


_F = TypeVar("_F", bound=Callable[..., Any])


def torchao_required(func: _F) -> _F:
    """Decorator: calling ``func`` without torchao installed raises MissingDependencyError
    with the install line, instead of failing somewhere inside it."""
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not is_torchao_available():
            raise MissingDependencyError("torchao", extra="torchao", feature=func.__name__)
        return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
