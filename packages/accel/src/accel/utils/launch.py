"""Accelerate's ``accelerate.utils.launch`` path: the launch helpers of :mod:`accel_launch`."""

from __future__ import annotations

from accel_launch.launch_compat import PrepareForLaunch, _filter_args, setup_fp8_env
from accel_launch.launch_utils import (
    convert_dict_to_env_variables,
    is_port_in_use,
    prepare_deepspeed_cmd_env,
    prepare_extend_env_parallelism_config,
    prepare_multi_gpu_env,
    prepare_simple_launcher_cmd_env,
)

from accel._accelerate_helpers import (
    env_var_path_add,
    get_free_port,
    merge_dicts,
    prepare_sagemager_args_inputs,
    prepare_tpu,
)
from accel._module_compat import forward_to
from accel.commands.config.config_args import SageMakerConfig

__all__ = [
    "PrepareForLaunch",
    "_filter_args",
    "setup_fp8_env",
    "convert_dict_to_env_variables",
    "is_port_in_use",
    "prepare_deepspeed_cmd_env",
    "prepare_extend_env_parallelism_config",
    "prepare_multi_gpu_env",
    "prepare_simple_launcher_cmd_env",
]

__all__ += ["SageMakerConfig", "env_var_path_add", "get_free_port", "merge_dicts", "prepare_sagemager_args_inputs",
            "prepare_tpu"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils")
