"""Accelerate's ``accelerate.commands.config.cluster`` path: the questions for a machine."""

from __future__ import annotations

from accel_launch.cli_compat import get_cluster_input
from accel_launch.config_classes import ClusterConfig
from accel_launch.flags_plugins import DYNAMO_BACKENDS

from accel._module_compat import forward_to
from accel.utils.constants import DEEPSPEED_MULTINODE_LAUNCHERS, TORCH_DYNAMO_MODES

__all__ = ["ClusterConfig", "DEEPSPEED_MULTINODE_LAUNCHERS", "DYNAMO_BACKENDS",
           "TORCH_DYNAMO_MODES", "get_cluster_input"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.commands.config.config_args")
