"""Accelerate's ``accelerate.commands.launch`` path: the objects of :mod:`accel_launch`."""

from __future__ import annotations

from accel_launch.cli_compat import (
    CustomArgumentParser,
    CustomHelpFormatter,
    clean_option,
    deepspeed_launcher,
    multi_gpu_launcher,
    options_to_group,
    sagemaker_launcher,
    simple_launcher,
    tpu_launcher,
    tpu_pod_launcher,
    verb_main,
)
from accel_launch.elastic import run_launch as launch_command_run
from accel_launch.flags_plugins import DYNAMO_BACKENDS
from accel_launch.launch import _validate_launch_command, launch_command, launch_command_parser
from accel_launch.launch_utils import (
    prepare_deepspeed_cmd_env,
    prepare_multi_gpu_env,
    prepare_simple_launcher_cmd_env,
)

from accel._module_compat import forward_to

main = verb_main("launch")

__all__ = ["_validate_launch_command", "launch_command", "launch_command_parser",
           "launch_command_run",
           "prepare_deepspeed_cmd_env", "prepare_multi_gpu_env", "prepare_simple_launcher_cmd_env",
           "CustomArgumentParser", "CustomHelpFormatter", "DYNAMO_BACKENDS", "clean_option",
           "deepspeed_launcher", "main", "multi_gpu_launcher", "options_to_group",
           "sagemaker_launcher",
           "simple_launcher", "tpu_launcher", "tpu_pod_launcher"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.commands.config.config_args",
                         "accel.big_modeling")
