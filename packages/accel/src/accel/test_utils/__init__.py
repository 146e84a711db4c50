"""Test helpers shipped with accel, at Accelerate's ``accelerate.test_utils`` path.

Accelerate's test suite and many users' tests import from here: the ``require_*`` skip
decorators, the test device, ``accel launch`` command lines and subprocess runners
(:mod:`.testing`), the regression dataset and model (:mod:`.training`) and the example-script
comparison (:mod:`.examples`). ``import accel`` never loads this package (it imports unittest
and, for a few helpers, pytest/datasets/transformers lazily).
``accel.test_utils.scripts`` holds the scripts Accelerate's suite launches by path
(``test_script`` — also the end-to-end check `accel test` launches —, ``test_sync``,
``test_ops``, ``test_distributed_data_loop``); the first three are attributes here too.
"""

from __future__ import annotations

from accel.test_utils.testing import (
    DEFAULT_LAUNCH_COMMAND,
    are_the_same_tensors,
    assert_exception,
    capture_call_output,
    device_count,
    execute_subprocess_async,
    get_launch_command,
    get_torch_dist_unique_port,
    memory_allocated_func,
    path_in_accelerate_package,
    pytest_xdist_worker_id,
    require_bnb,
    require_cpu,
    require_cuda,
    require_cuda_or_hpu,
    require_cuda_or_xpu,
    require_fp8,
    require_fp16,
    require_huggingface_suite,
    require_mlu,
    require_mps,
    require_multi_device,
    require_multi_gpu,
    require_multi_gpu_or_xpu,
    require_multi_xpu,
    require_musa,
    require_non_cpu,
    require_non_hpu,
    require_non_torch_xla,
    require_non_xpu,
    require_npu,
    require_pippy,
    require_sdaa,
    require_single_device,
    require_single_gpu,
    require_single_xpu,
    require_torch_min_version,
    require_torchao,
    require_torchvision,
    require_tpu,
    require_transformer_engine,
    require_transformer_engine_mxfp8,
    require_xpu,
    run_first,
    skip,
    slow,
    torch_device,
)
from accel.test_utils.training import RegressionDataset, RegressionModel

# the bundled scripts as modules, as Accelerate offers them (``debug_launcher(test_script.main)``)
from accel.test_utils.scripts import test_ops, test_script, test_sync  # isort: skip

__all__ = [
    "DEFAULT_LAUNCH_COMMAND", "RegressionDataset", "RegressionModel", "are_the_same_tensors",
    "assert_exception", "capture_call_output", "device_count", "execute_subprocess_async",
    "get_launch_command", "get_torch_dist_unique_port", "memory_allocated_func",
    "path_in_accelerate_package", "pytest_xdist_worker_id", "require_bnb", "require_cpu",
    "require_cuda", "require_cuda_or_hpu", "require_cuda_or_xpu", "require_fp8", "require_fp16",
    "require_huggingface_suite", "require_mlu", "require_mps", "require_multi_device",
    "require_multi_gpu", "require_multi_gpu_or_xpu", "require_multi_xpu", "require_musa",
    "require_non_cpu", "require_non_hpu", "require_non_torch_xla", "require_non_xpu",
    "require_npu", "require_pippy", "require_sdaa", "require_single_device",
    "require_single_gpu", "require_single_xpu", "require_torch_min_version", "require_torchao",
    "require_torchvision", "require_tpu", "require_transformer_engine",
    "require_transformer_engine_mxfp8", "require_xpu", "run_first", "skip", "slow",
    "torch_device", "test_ops", "test_script", "test_sync",
]
