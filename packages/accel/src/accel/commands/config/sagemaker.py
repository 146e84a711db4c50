"""Accelerate's ``accelerate.commands.config.sagemaker`` path: SageMaker questions, refused
(accel does not launch on SageMaker)."""

from __future__ import annotations

from accel_launch.cli_compat import get_sagemaker_input
from accel_launch.config_classes import SageMakerConfig
from accel_launch.flags_plugins import DYNAMO_BACKENDS

from accel._module_compat import forward_to
from accel.utils.constants import SAGEMAKER_PARALLEL_EC2_INSTANCES, TORCH_DYNAMO_MODES

__all__ = ["DYNAMO_BACKENDS", "SAGEMAKER_PARALLEL_EC2_INSTANCES", "SageMakerConfig",
           "TORCH_DYNAMO_MODES", "get_sagemaker_input"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.commands.config.config_args")
