"""Accelerate's ``accelerate.test_utils.testing`` path: ``unittest`` skip decorators, the
device the tests run on, launch/subprocess helpers and base test cases.

Accelerate's own test suite and many users' tests import these, so they keep Accelerate's
names, arguments and skip conditions. Conditions are evaluated when a test is decorated (as
in Accelerate) and read this module's ``is_*_available`` names at that moment, so
``mock.patch("accel.test_utils.testing.is_wandb_available", ...)`` changes the outcome.
Devices accel does not run on (XPU, NPU, MLU, MUSA, SDAA, HPU, Neuron, TPU) always skip.
"""

from __future__ import annotations

import unittest
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from accel.state import AcceleratorState, GradientState
from accel.test_utils._cases import (
    AccelerateTestCase,
    MockingTestCase,
    TempDirTestCase,
    are_the_same_tensors,
    assert_exception,
    capture_call_output,
    get_torch_dist_unique_port,
    path_in_accelerate_package,
    pytest_xdist_worker_id,
)
from accel.test_utils._subprocess import (
    SubprocessCallException,
    execute_subprocess_async,
    get_launch_command,
    run_command,
)
from accel.utils import (
    check_cuda_fp8_capability,
    compare_versions,
    gather,
    is_aim_available,
    is_bnb_available,
    is_clearml_available,
    is_comet_ml_available,
    is_cuda_available,
    is_datasets_available,
    is_deepspeed_available,
    is_dvclive_available,
    is_fp8_available,
    is_fp16_available,
    is_habana_gaudi1,
    is_hpu_available,
    is_import_timer_available,
    is_matplotlib_available,
    is_mlflow_available,
    is_mlu_available,
    is_mps_available,
    is_musa_available,
    is_neuron_available,
    is_npu_available,
    is_pandas_available,
    is_peft_available,
    is_pippy_available,
    is_pytest_available,
    is_schedulefree_available,
    is_sdaa_available,
    is_swanlab_available,
    is_tensorboard_available,
    is_timm_available,
    is_torch_version,
    is_torch_xla_available,
    is_torchao_available,
    is_torchdata_stateful_dataloader_available,
    is_torchvision_available,
    is_trackio_available,
    is_transformer_engine_available,
    is_transformer_engine_mxfp8_available,
    is_transformers_available,
    is_triton_available,
    is_wandb_available,
    is_xpu_available,
    parse_flag_from_env,
    str_to_bool,
)

__all__ = [
    "AccelerateTestCase", "AcceleratorState", "DEFAULT_LAUNCH_COMMAND", "GradientState",
    "MockingTestCase", "SubprocessCallException", "TempDirTestCase", "are_the_same_tensors",
    "assert_exception", "capture_call_output", "check_cuda_fp8_capability", "compare_versions",
    "device_count", "execute_subprocess_async", "gather", "get_backend", "get_launch_command",
    "get_torch_dist_unique_port", "is_habana_gaudi1", "is_torch_version",
    "memory_allocated_func", "parse_flag_from_env", "path_in_accelerate_package",
    "pytest_xdist_worker_id", "run_command", "run_first", "skip", "slow", "str_to_bool",
    "torch_device",
]  # plus every require_* and is_*_available name below (see the module's namespace)

_Decorator = Callable[[Any], Any]


def get_backend() -> tuple[str, int, Callable[[], int]]:
    """``(device type, device count, allocated-memory function)`` of the device tests run on:
    CUDA, else Apple MPS, else the CPU (accel runs on no other accelerator)."""
    if is_cuda_available():
        return "cuda", torch.cuda.device_count(), torch.cuda.memory_allocated
    if is_mps_available(min_version="2.0"):
        return "mps", 1, torch.mps.current_allocated_memory
    if is_mps_available():
        return "mps", 1, lambda: 0
    return "cpu", 1, lambda: 0


torch_device, device_count, memory_allocated_func = get_backend()

#: ``accel launch --num_processes=<device_count> --monitor_interval=0.1``, as Accelerate's.
DEFAULT_LAUNCH_COMMAND = get_launch_command(num_processes=device_count, monitor_interval=0.1)

_run_slow_tests = parse_flag_from_env("RUN_SLOW", default=False)


def _skip_unless(condition: bool, reason: str, test_case: Any) -> Any:
    return unittest.skipUnless(condition, reason)(test_case)


def skip(test_case: Any) -> Any:
    """Skip the test unconditionally."""
    return unittest.skip("Test was skipped")(test_case)


def slow(test_case: Any) -> Any:
    """Skip unless ``RUN_SLOW`` is set to a true value (slow tests are opt-in)."""
    return _skip_unless(_run_slow_tests, "test is slow", test_case)


def run_first(test_case: Any) -> Any:
    """``pytest.mark.order(1)`` when pytest is installed (pytest-order then runs it first),
    else the test unchanged; pytest is imported only here."""
    if is_pytest_available():
        import pytest

        return pytest.mark.order(1)(test_case)
    return test_case


def _unsupported(name: str, device: str) -> _Decorator:
    """A ``require_<device>`` that always skips: accel does not run on ``device``."""
    def decorator(test_case: Any) -> Any:
        return unittest.skip(f"test requires {device}, which accel does not support")(test_case)

    decorator.__name__ = decorator.__qualname__ = name
    decorator.__doc__ = f"Skip always: the test needs {device}, a device accel does not run on."
    return decorator


def _needs(name: str, check: str, reason: str) -> _Decorator:
    """A ``require_*`` that skips unless this module's ``check`` function returns true."""
    def decorator(test_case: Any) -> Any:
        return _skip_unless(bool(globals()[check]()), reason, test_case)

    decorator.__name__ = decorator.__qualname__ = name
    decorator.__doc__ = f"Skip unless ``{check}()``: {reason}."
    return decorator


require_xpu = _unsupported("require_xpu", "an XPU")
require_single_xpu = _unsupported("require_single_xpu", "a single XPU")
require_multi_xpu = _unsupported("require_multi_xpu", "several XPUs")
require_npu = _unsupported("require_npu", "an NPU")
require_mlu = _unsupported("require_mlu", "an MLU")
require_musa = _unsupported("require_musa", "a MUSA device")
require_sdaa = _unsupported("require_sdaa", "an SDAA device")
require_neuron = _unsupported("require_neuron", "Neuron cores")
require_tpu = _unsupported("require_tpu", "a TPU")

require_peft = _needs("require_peft", "is_peft_available", "test requires PEFT")
require_datasets = _needs("require_datasets", "is_datasets_available",
                          "test requires the datasets library")
require_transformers = _needs("require_transformers", "is_transformers_available",
                              "test requires the transformers library")
require_timm = _needs("require_timm", "is_timm_available", "test requires the timm library")
require_torchvision = _needs("require_torchvision", "is_torchvision_available",
                             "test requires the torchvision library")
require_triton = _needs("require_triton", "is_triton_available",
                        "test requires the triton library")
require_schedulefree = _needs("require_schedulefree", "is_schedulefree_available",
                              "test requires the schedulefree library")
require_bnb = _needs("require_bnb", "is_bnb_available", "test requires the bitsandbytes library")
require_deepspeed = _needs("require_deepspeed", "is_deepspeed_available",
                           "test requires DeepSpeed")
require_tensorboard = _needs("require_tensorboard", "is_tensorboard_available",
                             "test requires Tensorboard")
require_wandb = _needs("require_wandb", "is_wandb_available", "test requires wandb")
require_trackio = _needs("require_trackio", "is_trackio_available", "test requires trackio")
require_comet_ml = _needs("require_comet_ml", "is_comet_ml_available", "test requires comet_ml")
require_aim = _needs("require_aim", "is_aim_available", "test requires aim")
require_clearml = _needs("require_clearml", "is_clearml_available", "test requires clearml")
require_dvclive = _needs("require_dvclive", "is_dvclive_available", "test requires dvclive")
require_swanlab = _needs("require_swanlab", "is_swanlab_available", "test requires swanlab")
require_pandas = _needs("require_pandas", "is_pandas_available", "test requires pandas")
require_mlflow = _needs("require_mlflow", "is_mlflow_available", "test requires mlflow")
require_import_timer = _needs("require_import_timer", "is_import_timer_available",
                              "test requires tuna interpreter")
require_transformer_engine = _needs("require_transformer_engine",
                                    "is_transformer_engine_available",
                                    "test requires transformers engine")
require_transformer_engine_mxfp8 = _needs(
    "require_transformer_engine_mxfp8", "is_transformer_engine_mxfp8_available",
    "test requires transformers engine MXFP8 block scaling")
require_torchao = _needs("require_torchao", "is_torchao_available", "test requires torchao")
require_matplotlib = _needs("require_matplotlib", "is_matplotlib_available",
                            "test requires matplotlib")
require_torchdata_stateful_dataloader = _needs(
    "require_torchdata_stateful_dataloader", "is_torchdata_stateful_dataloader_available",
    "test requires torchdata.stateful_dataloader")
require_fp16 = _needs("require_fp16", "is_fp16_available", "test requires FP16 support")
require_mps = _needs("require_mps", "is_mps_available",
                     "test requires a `mps` backend support in `torch`")


def _cuda() -> bool:
    return bool(is_cuda_available() and not is_torch_xla_available())


def require_cpu(test_case: Any) -> Any:
    """Skip when an accelerator is there: the test is for the CPU only."""
    return _skip_unless(torch_device == "cpu", "test requires only a CPU", test_case)


def require_non_cpu(test_case: Any) -> Any:
    """Skip without a hardware accelerator (CUDA or MPS)."""
    return _skip_unless(torch_device != "cpu", "test requires a GPU", test_case)


def require_cuda(test_case: Any) -> Any:
    """Skip without a CUDA GPU (or when torch_xla is installed, as in Accelerate)."""
    return _skip_unless(_cuda(), "test requires a GPU", test_case)


def require_cuda_or_hpu(test_case: Any) -> Any:
    """Skip without a CUDA GPU (accel runs on no HPU)."""
    return _skip_unless(_cuda(), "test requires a GPU or HPU", test_case)


def require_cuda_or_xpu(test_case: Any) -> Any:
    """Skip without a CUDA GPU (accel runs on no XPU)."""
    return _skip_unless(_cuda(), "test requires a CUDA GPU or XPU", test_case)


def require_non_xpu(test_case: Any) -> Any:
    """Skip on an XPU: never, since accel does not run tests there."""
    return _skip_unless(torch_device != "xpu", "test requires a non-XPU", test_case)


def require_non_hpu(test_case: Any) -> Any:
    """Skip on an HPU: never, since accel does not run tests there."""
    return _skip_unless(torch_device != "hpu", "test requires a non-HPU", test_case)


def require_non_torch_xla(test_case: Any) -> Any:
    """Skip when torch_xla is installed."""
    return _skip_unless(not is_torch_xla_available(), "test requires an env without TorchXLA",
                        test_case)


def require_fp8(test_case: Any) -> Any:
    """Skip unless an fp8 library is installed and, with CUDA, the GPU computes in fp8."""
    available = bool(is_fp8_available())
    if torch.cuda.is_available() and not check_cuda_fp8_capability():
        available = False
    return _skip_unless(available, "test requires FP8 support", test_case)


def require_fsdp2(test_case: Any) -> Any:
    """Skip on torch older than 2.5 (FSDP2's ``fully_shard``)."""
    return _skip_unless(is_torch_version(">=", "2.5.0"), "test requires FSDP2 (torch >= 2.5.0)",
                        test_case)


def require_tp(test_case: Any) -> Any:
    """Skip unless torch >= 2.3 and transformers >= 4.52 (tensor parallel plans)."""
    ok = is_torch_version(">=", "2.3.0") and is_transformers_available() \
        and compare_versions("transformers", ">=", "4.52.0")
    return _skip_unless(bool(ok), "test requires torch version >= 2.3.0 and transformers "
                        "version >= 4.52.0", test_case)


def require_torch_min_version(test_case: Any = None, version: str | None = None) -> Any:
    """Skip on torch older than ``version``; usable bare or as ``(version="2.4")``."""
    if test_case is None:
        return partial(require_torch_min_version, version=version)
    return _skip_unless(is_torch_version(">=", str(version)),
                        f"test requires torch version >= {version}", test_case)


def require_huggingface_suite(test_case: Any) -> Any:
    """Skip unless both transformers and datasets are installed."""
    ok = is_transformers_available() and is_datasets_available()
    return _skip_unless(bool(ok), "test requires the Hugging Face suite", test_case)


def require_pippy(test_case: Any) -> Any:
    """Skip unless torch's pipelining (``torch.distributed.pipelining``) is there."""
    return _skip_unless(bool(is_pippy_available()), "test requires pippy", test_case)


def require_single_device(test_case: Any) -> Any:
    """Skip unless there is exactly one accelerator device."""
    return _skip_unless(torch_device != "cpu" and device_count == 1,
                        "test requires a single device accelerator", test_case)


def require_single_gpu(test_case: Any) -> Any:
    """Skip unless exactly one CUDA GPU is visible."""
    return _skip_unless(torch.cuda.device_count() == 1, "test requires a GPU", test_case)


def require_multi_device(test_case: Any) -> Any:
    """Skip unless several accelerator devices are visible."""
    return _skip_unless(device_count > 1, "test requires multiple hardware accelerators",
                        test_case)


def require_multi_gpu(test_case: Any) -> Any:
    """Skip unless several CUDA GPUs are visible."""
    return _skip_unless(torch.cuda.device_count() > 1, "test requires multiple GPUs", test_case)


def require_multi_gpu_or_xpu(test_case: Any) -> Any:
    """Skip unless several CUDA GPUs are visible (accel runs on no XPU)."""
    return _skip_unless(bool(is_cuda_available()) and device_count > 1,
                        "test requires multiple GPUs or XPUs", test_case)


def require_trackers(test_case: Any) -> Any:
    """Skip unless wandb, tensorboard, trackio or swanlab is installed and comet_ml is not
    (comet_ml patches the others on import, as Accelerate's condition says)."""
    some = any((is_wandb_available(), is_tensorboard_available(), is_trackio_available(),
                is_swanlab_available()))
    return _skip_unless(bool(some and not is_comet_ml_available()),
                        "test requires at least one tracker to be available and for `comet_ml` "
                        "to not be installed", test_case)
